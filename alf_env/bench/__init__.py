"""``alf-env-bench``: env-steps/s of alf_env and of the usual alternatives, side by side.

What it measures
----------------
For every (workload, number of envs) case, each backend builds a batched env
of ``num_envs`` copies of the same env, resets it, warms up, and then steps it
with fixed, precomputed actions (the same actions for every backend) while the
clock runs; then it closes the env. Start-up, reset and warm-up are excluded
from the timing. The rate reported is *env-steps per second* (env-steps done
while the clock ran / seconds).

Backends (:data:`alf_env.bench.backends.BACKENDS`; ``--backends`` picks some by
id, and the output names them as users know them). The unsuffixed alf_env
backends use the classes' default arguments:

======================  ======================================  ===================================
id (``--backends``)     name in the output                      what
======================  ======================================  ===================================
``fast``                FastParallelEnvironment                 the ALF API, shared memory
``fast_1pw``            FastParallelEnvironment (1 env/worker)  ``num_workers=num_envs`` (skipped
                                                                while the class has no such
                                                                argument)
``fast_spread``         FastParallelEnvironment (spread)        ``worker_cpus="spread"``
``fast_os``             FastParallelEnvironment (OS-placed)     ``worker_cpus=None`` (the OS places
                                                                the workers from the start; under
                                                                the default ``"auto"`` the env may
                                                                pin them while it runs)
``fast_vector``         FastVectorEnv                           ``alf_env.vector``'s: gymnasium
                                                                API, shared memory, a drop-in for
                                                                ``AsyncVectorEnv``
``fast_vector_1pw``     FastVectorEnv (1 env/worker)            ``num_workers=num_envs``
``fast_vector_epw4``    FastVectorEnv (4 envs/worker)           ``envs_per_worker=4``
``fast_vector_spread``  FastVectorEnv (spread)                  ``worker_cpus="spread"``
``fast_vector_os``      FastVectorEnv (OS-placed)               ``worker_cpus=None``
``fast_vector_async``   FastVectorEnv (half batch)              ``batch_size=num_envs // 2``:
                                                                EnvPool-style, each step returns
                                                                the first half of the envs to
                                                                finish
``parallel``            ParallelAlfEnvironment                  the ALF API, pipes
``sb3_alf``             FastSubprocVecEnv                       ``alf_env.sb3``'s (SB3 ``VecEnv``
                                                                API)
``ray_vector``          RayVectorEnv                            ``alf_env.distributed``'s,
                                                                ``num_actors=2``; if no Ray runs,
                                                                starts a local one for each
                                                                measurement and stops it afterwards
``gym_async``           AsyncVectorEnv                          gymnasium's, ``shared_memory=True``
``gym_sync``            SyncVectorEnv                           gymnasium's (in this process)
``sb3_subproc``         SubprocVecEnv                           stable-baselines3's
``pufferlib``           PufferLib                               PufferLib's ``Multiprocessing``
                                                                (pufferlib-core), one worker per
                                                                usable CPU
``pufferlib_1w``        PufferLib (1 worker)                    the same with one worker
``pufferlib_async``     PufferLib (half batch)                  the same with half the envs per
                                                                batch
``single``              plain loop (1 env)                      reference: one env stepped in a
                                                                plain loop in this process
                                                                (whatever ``num_envs`` is)
``ceiling``             ceiling                                 reference: one env per usable CPU,
                                                                each in its own process stepping in
                                                                a plain loop, rates summed: what
                                                                the machine can do with these
                                                                Python envs
``envpool``             EnvPool                                 reference: EnvPool's C++ version of
                                                                the env (``make_gymnasium``, one
                                                                thread per CPU); real workloads
                                                                only
======================  ======================================  ===================================

A backend whose package or class is missing is reported as skipped with the
reason. Every backend that starts processes starts them with ``fork`` unless
its default says otherwise. All backends auto-reset (the step after the end
of an episode is a reset; SB3 resets in the same step).

Workloads (:mod:`alf_env.bench.workloads`): ``W1`` trivial float32[4] env
(transport overhead), ``W2`` uint8[84, 84, 4] frames (bytes moved), ``W3``
~1 ms of CPU per step, ``W4`` 0.2-2 ms of CPU per step (uneven envs), the
sweep ``S10`` ... ``S1000`` (10-1000 µs of CPU per step with a 4-key float
info; ``sweep`` names them all), the real ``HalfCheetah-v5`` (MuJoCo),
``Pong`` (Atari, EnvPool's preprocessing) and ``CartPole-v1``, and any
gymnasium id. A workload whose packages are missing is reported as skipped
(``pip install alf_env[bench]`` installs them).

Conditions: ``--load N`` runs N busy-loop processes beside every measurement
(a machine shared with other work); ``--policy mlp`` runs a torch MLP's
forward pass on every batch of observations, torch at its default threads
unless ``--torch-threads`` (a training loop). ``--env ENV`` measures a user's
env (a gymnasium id or ``module:function``) against the usual alternatives,
and ``--env ENV --tune`` recommends what to use for it: the fastest
FastVectorEnv layout, or SyncVectorEnv where that is faster
(:mod:`~alf_env.bench.tune`).

Measurements are interleaved: for each repeat, every backend is measured once
(round robin, in an order rotated per repeat), so machine noise hits all
backends alike. *Paired* ratios compare repeat i of one backend with repeat i
of another.

Output, on stdout (every line at most 100 columns): per case, the backends
measured, fastest first, with the median env-steps/s, the min-max over the
repeats and the paired ratio to the ceiling; a legend of the reference rows; a
``*`` on a figure above the ceiling row, which only noise can put there; the
skipped and failed backends; and, last, the verdict
(:func:`~alf_env.bench.report.verdict`): one paragraph naming the fastest
choice per case with its margin over the runner-up and the spread of its
repeats, "no clear winner" (naming both) when the repeats of the top two
overlap, and what to use where gymnasium's SyncVectorEnv or EnvPool wins. A
progress bar goes to stderr. Written to ``--out DIR``: ``results.json`` (every
measurement), ``results.md`` (or ``--markdown PATH``: every backend, every
figure, the paired ratios to ``AsyncVectorEnv``, ``ceiling`` and ``EnvPool``
and the table of the ratios the speed targets are stated in),
``workload_<name>.png`` (a bar per backend, reference rows marked, per
workload), ``throughput.png`` (env-steps/s against the number of envs, for
workloads measured at several counts) and ``ratios.png`` (each backend's
paired ratios to the reference rows).

Examples::

    alf-env-bench --quick                       # under three minutes on 2 cores
    alf-env-bench                               # everything
    alf-env-bench --workload HalfCheetah-v5,sweep --backends fast_vector,ceiling \\
        --repeats 5 --out hc_results

The exit status is 1 if a backend failed (an error, not a skip) or a worker
process was left running, 130 if interrupted (what was measured is still
reported), else 0.

The package's modules: :mod:`~alf_env.bench.cli` (arguments, run, files),
:mod:`~alf_env.bench.backends` (the backends), :mod:`~alf_env.bench.references`
(``single``, ``ceiling``, ``envpool``), :mod:`~alf_env.bench.workloads`,
:mod:`~alf_env.bench.measure` (timing, interleaving, progress bar),
:mod:`~alf_env.bench.report` (tables, paired ratios, the verdict),
:mod:`~alf_env.bench.plot`
and :mod:`~alf_env.bench.core` (data types). Its names load on first use, so
a worker that unpickles a workload constructor imports neither torch nor
matplotlib.
"""

from alf_env.lazy_import import lazy_exports

# Names re-exported here -> the module that defines them (imported on first use).
_LAZY = {
    "main": "alf_env.bench.cli", "parse_args": "alf_env.bench.cli",
    "cases_of": "alf_env.bench.cli", "QUICK": "alf_env.bench.cli",
    "FULL": "alf_env.bench.cli", "BACKENDS": "alf_env.bench.backends",
    "Backend": "alf_env.bench.backends", "PLOT_TITLE": "alf_env.bench.plot",
    "RATIO_PLOT_TITLE": "alf_env.bench.plot", "WORKLOADS": "alf_env.bench.workloads",
    "WORKLOAD_PLOT_TITLE": "alf_env.bench.plot",
}

__all__ = sorted(_LAZY)

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
