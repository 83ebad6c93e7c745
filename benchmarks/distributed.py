"""What Ray costs on top of the local fast path, and a scaling model from it.

On one machine it measures:

* HalfCheetah-v5, 16 envs: a local ``FastVectorEnv`` against ``RayVectorEnv``
  with the same envs on 2 actors, synchronous and asynchronous
  (``batch_size=8``: one actor's batch in flight while the other's is used);
* the round trip of an empty call to an actor (``EnvActor.ping``);
* the per-batch cost of Ray with W1 (an env that does almost nothing):
  ``RayVectorEnv`` on one actor minus a local ``FastVectorEnv`` with the same
  ``E`` envs, wall time, and the trainer's CPU time per batch, for several ``E``.

It then fits ``Ray overhead per batch = a + b * E`` and driver CPU per batch
``= a_cpu + b_cpu * E`` and prints the env-steps/s the model expects for 1, 4
and 16 machines, and the envs per actor that keep Ray's overhead under 10 %
(see docs/distributed.rst). Run::

    python benchmarks/distributed.py                # about 2 minutes
    python benchmarks/distributed.py --quick        # about 40 s, noisier
    python benchmarks/distributed.py --out bench_out/distributed.json

It starts a local Ray instance (``--address`` to use a running cluster).
"""

import argparse
import functools
import json
import os
import statistics
import sys
import time
from typing import Any, Callable, Dict, List, Optional

import gymnasium as gym
import numpy as np

from alf_env.bench.workloads import make_env
from alf_env.distributed import RayVectorEnv
from alf_env.vector import FastVectorEnv

NUM_ENVS = 16
NUM_ACTORS = 2
SWEEP_ENVS = (1, 4, 16, 64)
#: cores of the machines of the scaling model, and their envs per actor.
MODEL_CORES = 16
MODEL_MACHINES = (1, 4, 16)
MODEL_ENVS = (64, 256)


def fns(workload: str, n: int) -> List[Callable[[], gym.Env]]:
    return [functools.partial(make_env, workload, i) for i in range(n)]


def steps_per_second(env: Any, steps: int, warmup: int) -> Dict[str, float]:
    """Env-steps/s of ``env.step`` (whole batches) and the trainer's CPU per step."""
    env.action_space.seed(0)
    env.reset(seed=0)
    actions = [env.action_space.sample() for _ in range(8)]
    for t in range(warmup):
        env.step(actions[t % 8])
    wall, cpu = time.perf_counter(), time.process_time()
    for t in range(steps):
        env.step(actions[t % 8])
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    rows = getattr(env, "batch_size", None) or env.num_envs
    return {"steps_per_s": rows * steps / wall, "batch_s": wall / steps, "cpu_s": cpu / steps}


def median_of(repeats: int, build: Callable[[], Any], steps: int, warmup: int
              ) -> Dict[str, float]:
    runs = []
    for _ in range(repeats):
        env = build()
        try:
            runs.append(steps_per_second(env, steps, warmup))
        finally:
            env.close()
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


def round_trip(samples: int) -> float:
    """Median seconds of an empty call to an actor (submit, run, get)."""
    import ray
    env = RayVectorEnv(fns("W1", 1), num_actors=1, actor_options={"num_cpus": 0})
    try:
        actor = env.actor_handles()[0]
        times = []
        for _ in range(samples):
            begin = time.perf_counter()
            ray.get(actor.ping.remote())
            times.append(time.perf_counter() - begin)
        return statistics.median(times[samples // 10:])
    finally:
        env.close()


def fit(xs: List[float], ys: List[float]) -> List[float]:
    """Least-squares ``y = a + b * x``: returns ``[a, b]``."""
    b, a = np.polyfit(np.asarray(xs, float), np.asarray(ys, float), 1)
    return [float(a), float(b)]


def model(m: Dict[str, Any]) -> Dict[str, Any]:
    """The scaling model of docs/distributed.rst, from the measured figures.

    ``M`` machines of ``MODEL_CORES`` cores, one actor of ``E`` envs each. An
    actor's batch takes ``t_env(E) = t0 + E * c / cores``; Ray adds the
    latency ``L(E) = a + b E`` per batch (the actors' round trips overlap)
    and the trainer spends ``D(E) = a_cpu + b_cpu E`` of CPU per actor batch,
    one actor after the other. Synchronous steps: ``M E / (t_env + L +
    (M - 1) D)`` env-steps/s. Asynchronous (``batch_size = E``, every other
    actor's batch in flight while the trainer handles one):
    ``min(M E / (t_env + L), E / D)``.
    """
    core_s_per_step = m["cores_here"] / m["half_cheetah"]["local"]["steps_per_s"]
    t0 = m["w1_local_batch_s"][str(SWEEP_ENVS[0])]
    a, b = m["overhead_fit"][0], max(0.0, m["overhead_fit"][1])
    a_cpu, b_cpu = m["driver_cpu_fit"][0], max(0.0, m["driver_cpu_fit"][1])

    def t_env(e: int) -> float:
        return t0 + e * core_s_per_step / MODEL_CORES

    def ray_part(machines: int, e: int, per_env: bool = True) -> float:
        k = 1.0 if per_env else 0.0
        return a + k * b * e + (machines - 1) * (a_cpu + k * b_cpu * e)

    def min_envs(machines: int, per_env: bool) -> Optional[int]:
        for e in range(1, 1 << 17):
            if ray_part(machines, e, per_env) <= 0.1 / 0.9 * t_env(e):  # Ray <= 10 %
                return e
        return None

    rows = []
    for machines in MODEL_MACHINES:
        row: Dict[str, Any] = {"machines": machines,
                               "min_envs_10pct_measured": min_envs(machines, True),
                               "min_envs_10pct_fixed_costs": min_envs(machines, False)}
        for e in MODEL_ENVS:
            t = t_env(e) + ray_part(machines, e)
            row[f"sync_E{e}"] = machines * e / t
            row[f"ray_share_E{e}"] = ray_part(machines, e) / t
            row[f"async_E{e}"] = min(machines * e / (t_env(e) + a + b * e),
                                     e / (a_cpu + b_cpu * e))
        rows.append(row)
    return {"core_s_per_step": core_s_per_step, "cores_per_machine": MODEL_CORES,
            "t0_s": t0, "rows": rows}


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="100 steps, 1 repeat")
    parser.add_argument("--address", default=None, help="a running Ray cluster")
    parser.add_argument("--out", default="bench_out/distributed.json")
    parser.add_argument("--model-only", metavar="JSON", default=None,
                        help="recompute the model and the report from a saved run")
    args = parser.parse_args(argv)
    if args.model_only:
        with open(args.model_only) as f:
            m = json.load(f)
        m["model"] = model(m)
        report(m)
        return 0
    steps, repeats = (100, 1) if args.quick else (args.steps, args.repeats)
    warmup = max(10, steps // 10)

    import ray
    cores = len(os.sched_getaffinity(0))
    if args.address:
        ray.init(address=args.address, log_to_driver=False)
    else:
        ray.init(num_cpus=cores, include_dashboard=False, log_to_driver=False)
    load = os.getloadavg()[0]
    m: Dict[str, Any] = {"cores_here": cores, "load_avg_1min_at_start": load,
                         "steps": steps, "repeats": repeats}
    try:
        hc = fns("HalfCheetah-v5", NUM_ENVS)
        m["half_cheetah"] = {
            "local": median_of(repeats, lambda: FastVectorEnv(hc), steps, warmup),
            "ray_sync": median_of(repeats, lambda: RayVectorEnv(hc, num_actors=NUM_ACTORS),
                                  steps, warmup),
            "ray_async": median_of(repeats, lambda: RayVectorEnv(
                hc, num_actors=NUM_ACTORS, batch_size=NUM_ENVS // NUM_ACTORS), steps, warmup),
        }
        m["round_trip_s"] = round_trip(300 if not args.quick else 100)
        local, remote, overhead, cpu = {}, {}, [], []
        for e in SWEEP_ENVS:
            w1 = fns("W1", e)
            local[str(e)] = median_of(repeats, functools.partial(FastVectorEnv, w1), steps, warmup)
            remote[str(e)] = median_of(repeats, functools.partial(
                RayVectorEnv, w1, num_actors=1, actor_options={"num_cpus": 0}), steps, warmup)
            overhead.append(remote[str(e)]["batch_s"] - local[str(e)]["batch_s"])
            cpu.append(remote[str(e)]["cpu_s"])
        m["w1_local_batch_s"] = {k: v["batch_s"] for k, v in local.items()}
        m["w1_ray_batch_s"] = {k: v["batch_s"] for k, v in remote.items()}
        m["w1_ray_driver_cpu_s"] = dict(zip(map(str, SWEEP_ENVS), cpu))
        m["overhead_fit"] = fit(list(SWEEP_ENVS), overhead)
        m["driver_cpu_fit"] = fit(list(SWEEP_ENVS), cpu)
        m["model"] = model(m)
    finally:
        ray.shutdown()
    report(m)
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(m, f, indent=2)
    print(f"\nwrote {args.out}")
    return 0


def report(m: Dict[str, Any]) -> None:
    hc = m["half_cheetah"]
    base = hc["local"]["steps_per_s"]
    print(f"# {m['cores_here']} cores, 1-min load average {m['load_avg_1min_at_start']:.1f} "
          f"at start, {m['steps']} steps x {m['repeats']} repeats (medians)\n")
    print(f"| HalfCheetah-v5, {NUM_ENVS} envs | env-steps/s | x local | ms per batch |")
    print("|---|---:|---:|---:|")
    for name, label in (("local", "FastVectorEnv (local)"),
                        ("ray_sync", f"RayVectorEnv, {NUM_ACTORS} actors, sync"),
                        ("ray_async", f"RayVectorEnv, {NUM_ACTORS} actors, batch_size="
                                      f"{NUM_ENVS // NUM_ACTORS}")):
        r = hc[name]
        print(f"| {label} | {r['steps_per_s']:,.0f} | {r['steps_per_s'] / base:.2f} | "
              f"{r['batch_s'] * 1e3:.2f} |")
    print(f"\nactor round trip (empty call): {m['round_trip_s'] * 1e3:.2f} ms\n")
    print("| W1 envs per actor | local ms/batch | Ray ms/batch | Ray overhead ms | "
          "driver CPU ms |")
    print("|---:|---:|---:|---:|---:|")
    for e in SWEEP_ENVS:
        k = str(e)
        lo, ra = m["w1_local_batch_s"][k], m["w1_ray_batch_s"][k]
        print(f"| {e} | {lo * 1e3:.3f} | {ra * 1e3:.3f} | {(ra - lo) * 1e3:.3f} | "
              f"{m['w1_ray_driver_cpu_s'][k] * 1e3:.3f} |")
    a, b = m["overhead_fit"]
    a_cpu, b_cpu = m["driver_cpu_fit"]
    print(f"\nfit: Ray overhead per batch = {a * 1e3:.3f} ms + {b * 1e6:.2f} us x envs; "
          f"driver CPU = {a_cpu * 1e3:.3f} ms + {b_cpu * 1e6:.2f} us x envs")
    mod = m["model"]
    print(f"\nmodel: HalfCheetah {mod['core_s_per_step'] * 1e6:.0f} core-us per step, "
          f"{mod['cores_per_machine']}-core machines, one actor of E envs each:\n")
    head = " | ".join(f"E={e}: sync (Ray share) | E={e}: async" for e in MODEL_ENVS)
    print(f"| machines | {head} | E for Ray < 10%, sync: measured / fixed costs only |")
    print("|---:|" + "---:|" * (2 * len(MODEL_ENVS) + 1))
    for r in mod["rows"]:
        cells = " | ".join(f"{r[f'sync_E{e}']:,.0f} ({r[f'ray_share_E{e}']:.0%}) | "
                           f"{r[f'async_E{e}']:,.0f}" for e in MODEL_ENVS)
        need = [r["min_envs_10pct_measured"], r["min_envs_10pct_fixed_costs"]]
        need = " / ".join(str(n) if n else "not reachable" for n in need)
        print(f"| {r['machines']} | {cells} | {need} |")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
