"""PPO on gymnasium vector envs: the same agent, seed and budget on each vector env.

A compact PPO (clipped surrogate, GAE, one file, torch) trains on
``--env`` with each vector env named by ``--vector-env``:

* ``sync``  -- ``gymnasium.vector.SyncVectorEnv`` (every env in this process);
* ``async`` -- ``gymnasium.vector.AsyncVectorEnv`` (one process per env, pipes);
* ``alf``   -- ``alf_env.vector.FastVectorEnv`` with its default arguments (shared
  memory, the envs grouped into worker processes);
* ``alf-epw`` -- ``FastVectorEnv`` with ``--envs-per-worker`` envs per process.

Every vector env runs in gymnasium's ``SAME_STEP`` autoreset mode (the
observation returned at an episode's end is the next episode's first), and
all of them step the same seeded envs with the same actions, so the learning
curves agree step for step; only the wall-clock time differs. For each run the
script records ``(wall-clock seconds, env steps, mean return of the last 20
episodes)`` after every update, writes them to ``OUT/ppo_<env>.json``, plots
return against wall-clock seconds in ``OUT/ppo_<env>.png`` and prints a table:
time to reach ``--target-return``, final return and env-steps/s (medians over
``--repeats`` runs per vector env, taken round robin so that a change of load
on the machine hits every vector env alike), one table per torch thread setting
of ``--torch-threads`` (by default torch's own default, as in any training
script, and 1).

Discrete actions get a categorical policy; Box actions a Gaussian one, with
observations and rewards normalised by running statistics in the trainer (so
the envs stay exactly what ``--env`` names).

Run::

    python examples/ppo_training.py --env CartPole-v1 --total-steps 100000 --out ppo_out
"""

import argparse
import json
import os
import time
from typing import Any, Callable, Dict, List, Optional, Sequence

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode
from torch import nn

from alf_env.vector import FastVectorEnv

VECTOR_ENVS = ("sync", "async", "alf", "alf-epw")
#: ``--torch-threads`` value for torch's own default thread count.
DEFAULT_THREADS = "default"


def _threads(text: str) -> Any:
    if text == DEFAULT_THREADS:
        return text
    try:
        count = int(text)
    except ValueError:
        count = 0
    if count < 1:
        raise argparse.ArgumentTypeError(
            f"expected a thread count >= 1 or {DEFAULT_THREADS!r}, got {text!r}")
    return count


def make_vector_env(kind: str, env_id: str, num_envs: int,
                    envs_per_worker: int) -> gym.vector.VectorEnv:
    """The vector env ``kind`` of ``num_envs`` copies of ``env_id`` (SAME_STEP autoreset)."""
    fns: List[Callable[[], gym.Env]] = [lambda: gym.make(env_id)] * num_envs
    mode = AutoresetMode.SAME_STEP
    if kind == "sync":
        return gym.vector.SyncVectorEnv(fns, autoreset_mode=mode)
    if kind == "async":
        return gym.vector.AsyncVectorEnv(fns, autoreset_mode=mode)
    if kind == "alf":
        return FastVectorEnv(fns, autoreset_mode=mode)
    if kind == "alf-epw":
        return FastVectorEnv(fns, envs_per_worker=envs_per_worker, autoreset_mode=mode)
    raise ValueError(f"--vector-env: expected one of {VECTOR_ENVS}, got {kind!r}")


class RunningMeanStd:
    """Running mean and variance of batches (parallel-variance update)."""

    def __init__(self, shape: Sequence[int] = ()) -> None:
        self.mean = np.zeros(shape, np.float64)
        self.var = np.ones(shape, np.float64)
        self.count = 1e-4

    def update(self, batch: np.ndarray) -> None:
        mean, var, n = batch.mean(axis=0), batch.var(axis=0), batch.shape[0]
        delta, total = mean - self.mean, self.count + n
        self.mean = self.mean + delta * n / total
        self.var = (self.var * self.count + var * n
                    + delta ** 2 * self.count * n / total) / total
        self.count = total

    def normalize(self, x: np.ndarray) -> np.ndarray:
        return np.clip((x - self.mean) / np.sqrt(self.var + 1e-8), -10, 10)


class Agent(nn.Module):
    """Separate actor and critic MLPs (two tanh layers of ``hidden`` units)."""

    def __init__(self, obs_dim: int, action_space: gym.Space, hidden: int) -> None:
        super().__init__()
        self.discrete = isinstance(action_space, gym.spaces.Discrete)
        out = int(action_space.n) if self.discrete else int(np.prod(action_space.shape))

        def mlp(last: int, gain: float) -> nn.Sequential:
            layers = [nn.Linear(obs_dim, hidden), nn.Tanh(), nn.Linear(hidden, hidden),
                      nn.Tanh(), nn.Linear(hidden, last)]
            for layer in layers[::2]:
                nn.init.orthogonal_(layer.weight, np.sqrt(2))
                nn.init.zeros_(layer.bias)
            nn.init.orthogonal_(layers[-1].weight, gain)
            return nn.Sequential(*layers)

        self.critic = mlp(1, 1.0)
        self.actor = mlp(out, 0.01)
        self.log_std = nn.Parameter(torch.zeros(out)) if not self.discrete else None

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic(obs).squeeze(-1)

    def dist(self, obs: torch.Tensor) -> torch.distributions.Distribution:
        if self.discrete:
            return torch.distributions.Categorical(logits=self.actor(obs))
        mean = self.actor(obs)
        return torch.distributions.Normal(mean, self.log_std.exp().expand_as(mean))

    def log_prob_entropy(self, obs: torch.Tensor, actions: torch.Tensor):
        dist = self.dist(obs)
        if self.discrete:
            return dist.log_prob(actions.long()), dist.entropy()
        return dist.log_prob(actions).sum(-1), dist.entropy().sum(-1)


def train(args: argparse.Namespace, kind: str) -> Dict[str, Any]:
    """Trains one agent on vector env ``kind``; returns the run's record."""
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    started = time.perf_counter()
    envs = make_vector_env(kind, args.env, args.num_envs, args.envs_per_worker)
    startup_s = time.perf_counter() - started
    try:
        return _train(args, kind, envs, startup_s)
    finally:
        envs.close()


def _train(args: argparse.Namespace, kind: str, envs: gym.vector.VectorEnv,
           startup_s: float) -> Dict[str, Any]:
    n, t_len = args.num_envs, args.rollout_steps
    space = envs.single_action_space
    obs_dim = int(np.prod(envs.single_observation_space.shape))
    agent = Agent(obs_dim, space, args.hidden)
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.lr, eps=1e-5)
    continuous = not agent.discrete
    obs_stats = RunningMeanStd((obs_dim,)) if continuous else None
    ret_stats = RunningMeanStd() if continuous else None
    discounted = np.zeros(n)

    def prepare(obs: np.ndarray) -> torch.Tensor:
        obs = obs.reshape(n, -1).astype(np.float64)
        if obs_stats is not None:
            obs_stats.update(obs)
            obs = obs_stats.normalize(obs)
        return torch.as_tensor(obs, dtype=torch.float32)

    act_shape = () if agent.discrete else space.shape
    buf_obs = torch.zeros((t_len, n, obs_dim))
    buf_act = torch.zeros((t_len, n, *act_shape))
    buf_logp, buf_rew, buf_done, buf_val = (torch.zeros((t_len, n)) for _ in range(4))

    obs, _ = envs.reset(seed=args.seed)
    next_obs, next_done = prepare(obs), torch.zeros(n)
    episode_return = np.zeros(n)
    finished: List[float] = []
    points: List[List[float]] = []
    env_seconds, steps = 0.0, 0
    clock = time.perf_counter()
    num_updates = max(1, args.total_steps // (n * t_len))
    for update in range(num_updates):
        for group in optimizer.param_groups:  # linear learning-rate annealing
            group["lr"] = args.lr * (1.0 - update / num_updates)
        for t in range(t_len):
            buf_obs[t], buf_done[t] = next_obs, next_done
            with torch.no_grad():
                dist = agent.dist(next_obs)
                action = dist.sample()
                buf_val[t] = agent.value(next_obs)
            buf_act[t] = action
            buf_logp[t] = (dist.log_prob(action) if agent.discrete
                           else dist.log_prob(action).sum(-1))
            env_action = action.numpy()
            if continuous:
                env_action = np.clip(env_action, space.low, space.high)
            tick = time.perf_counter()
            obs, reward, terminated, truncated, _ = envs.step(env_action)
            env_seconds += time.perf_counter() - tick
            done = np.logical_or(terminated, truncated)
            episode_return += reward
            finished.extend(episode_return[done].tolist())
            episode_return[done] = 0.0
            if ret_stats is not None:  # scale rewards by the std of discounted returns
                discounted = discounted * args.gamma + reward
                ret_stats.update(discounted)
                discounted[done] = 0.0
                reward = reward / np.sqrt(ret_stats.var + 1e-8)
            buf_rew[t] = torch.as_tensor(reward, dtype=torch.float32)
            next_obs = prepare(obs)
            next_done = torch.as_tensor(done, dtype=torch.float32)
        steps += n * t_len
        _update(args, agent, optimizer, buf_obs, buf_act, buf_logp, buf_rew, buf_done,
                buf_val, next_obs, next_done)
        if finished:
            points.append([time.perf_counter() - clock, steps,
                           float(np.mean(finished[-20:]))])
    wall = time.perf_counter() - clock
    return {"vector_env": kind, "env": args.env, "num_envs": n, "seed": args.seed,
            "startup_seconds": startup_s, "wall_seconds": wall, "env_seconds": env_seconds,
            "env_steps": steps, "episodes": len(finished), "points": points}


def _update(args: argparse.Namespace, agent: Agent, optimizer: torch.optim.Optimizer,
            obs: torch.Tensor, actions: torch.Tensor, logps: torch.Tensor,
            rewards: torch.Tensor, dones: torch.Tensor, values: torch.Tensor,
            next_obs: torch.Tensor, next_done: torch.Tensor) -> None:
    """One PPO update: GAE advantages, then clipped-surrogate epochs over minibatches."""
    t_len = rewards.shape[0]
    with torch.no_grad():
        next_value = agent.value(next_obs)
        advantages = torch.zeros_like(rewards)
        gae = torch.zeros_like(next_value)
        for t in reversed(range(t_len)):
            not_done = 1.0 - (next_done if t == t_len - 1 else dones[t + 1])
            following = next_value if t == t_len - 1 else values[t + 1]
            delta = rewards[t] + args.gamma * following * not_done - values[t]
            gae = delta + args.gamma * args.gae_lambda * not_done * gae
            advantages[t] = gae
        returns = advantages + values
    flat = lambda x: x.reshape(-1, *x.shape[2:])  # noqa: E731
    b_obs, b_act, b_logp = flat(obs), flat(actions), flat(logps)
    b_adv, b_ret = flat(advantages), flat(returns)
    batch = b_obs.shape[0]
    minibatch = max(1, batch // args.minibatches)
    for _ in range(args.epochs):
        order = torch.randperm(batch)
        for start in range(0, batch, minibatch):
            idx = order[start:start + minibatch]
            logp, entropy = agent.log_prob_entropy(b_obs[idx], b_act[idx])
            ratio = (logp - b_logp[idx]).exp()
            adv = b_adv[idx]
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
            policy_loss = torch.max(-adv * ratio,
                                    -adv * ratio.clamp(1 - args.clip, 1 + args.clip)).mean()
            value_loss = 0.5 * ((agent.value(b_obs[idx]) - b_ret[idx]) ** 2).mean()
            loss = policy_loss + args.vf_coef * value_loss - args.ent_coef * entropy.mean()
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
            optimizer.step()


def summarize(runs: List[Dict[str, Any]], target: Optional[float]) -> Dict[str, Any]:
    """Time to reach ``target``, final return and env-steps/s of one vector env's runs
    (medians over the repeats; the time to target over the runs that reached it)."""
    reached = []
    for run in runs:
        point = next((p for p in run["points"] if target is not None and p[2] >= target), None)
        if point is not None:
            reached.append(point[0])
    finals = [run["points"][-1][2] for run in runs if run["points"]]
    return {"vector_env": runs[0]["vector_env"], "runs": len(runs),
            "seconds_to_target": float(np.median(reached)) if reached else None,
            "runs_reaching_target": len(reached),
            "final_return": float(np.median(finals)) if finals else float("nan"),
            "steps_per_second": float(np.median(
                [run["env_steps"] / run["wall_seconds"] for run in runs])),
            "env_steps_per_second": float(np.median(
                [run["env_steps"] / run["env_seconds"] for run in runs]))}


def tables(runs: List[Dict[str, Any]], kinds: Sequence[str], target: Optional[float],
           settings: Sequence[Any]) -> str:
    """One table per torch thread setting, each with a row per vector env."""
    parts = []
    for setting in settings:
        rows = [summarize([run for run in runs if run["vector_env"] == kind
                           and run["torch_threads_setting"] == setting], target)
                for kind in kinds]
        parts.append(f"torch threads: {setting} ({runs_threads(runs, setting)})\n\n"
                     + table(rows, target))
    return "\n\n".join(parts)


def runs_threads(runs: List[Dict[str, Any]], setting: Any) -> str:
    """How many threads torch used under ``setting``."""
    counts = sorted({run["torch_threads"] for run in runs
                     if run["torch_threads_setting"] == setting})
    return ", ".join(str(c) for c in counts) + " thread(s)"


def table(rows: List[Dict[str, Any]], target: Optional[float]) -> str:
    """The markdown table of :func:`summarize` rows."""
    goal = f"return {target:g}" if target is not None else "the target"
    lines = [f"| vector env | runs | time to {goal} (s) | final return | "
             f"env-steps/s (training) | env-steps/s (stepping only) |",
             "|---|---:|---:|---:|---:|---:|"]
    for row in rows:
        reached = "not reached"
        if row["seconds_to_target"] is not None:
            reached = f"{row['seconds_to_target']:.1f}"
            if row["runs_reaching_target"] < row["runs"]:
                reached += f" ({row['runs_reaching_target']} of {row['runs']} runs)"
        lines.append(f"| {row['vector_env']} | {row['runs']} | {reached} | "
                     f"{row['final_return']:.1f} | {row['steps_per_second']:,.0f} | "
                     f"{row['env_steps_per_second']:,.0f} |")
    return "\n".join(lines)


def plot(runs: List[Dict[str, Any]], path: str, title: str) -> None:
    """Return against wall-clock seconds, one line per vector env."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4.2))
    colors = {}
    for run in runs:
        points = np.asarray(run["points"]).reshape(-1, 3)
        kind = f"{run['vector_env']}, {run.get('torch_threads', '?')} torch thread(s)"
        line, = ax.plot(points[:, 0], points[:, 2], color=colors.get(kind),
                        label=None if kind in colors else kind, alpha=0.85)
        colors[kind] = line.get_color()  # repeats of a vector env share its colour
    ax.set_xlabel("wall-clock seconds (training included)")
    ax.set_ylabel("mean return of the last 20 episodes")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Train PPO with the same seed and budget on each vector env; write a "
                    "JSON of (seconds, env steps, mean return) points, a plot of return "
                    "against wall-clock seconds and a table.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--vector-env", nargs="+", choices=VECTOR_ENVS,
                        default=list(VECTOR_ENVS),
                        help="vector envs to train on, one run each")
    parser.add_argument("--env", default="CartPole-v1",
                        help="gymnasium env id (Box observations; Discrete or Box actions)")
    parser.add_argument("--total-steps", type=int, default=100_000,
                        help="env steps per run (summed over the envs)")
    parser.add_argument("--num-envs", type=int, default=8, help="envs per vector env")
    parser.add_argument("--envs-per-worker", type=int, default=2,
                        help="envs per worker process for alf-epw (divides --num-envs)")
    parser.add_argument("--seed", type=int, default=1,
                        help="seed of the envs, torch and numpy (the same for every run)")
    parser.add_argument("--out", default="ppo_out",
                        help="directory for ppo_<env>.json and ppo_<env>.png")
    parser.add_argument("--target-return", type=float, default=None,
                        help="return whose time-to-reach the table reports (None: the "
                             "env spec's reward_threshold, if any)")
    parser.add_argument("--repeats", type=int, default=1,
                        help="runs per vector env, taken round robin; the table gives "
                             "medians")
    parser.add_argument("--rollout-steps", type=int, default=128,
                        help="steps per env between updates")
    parser.add_argument("--epochs", type=int, default=4, help="PPO epochs per update")
    parser.add_argument("--minibatches", type=int, default=4, help="minibatches per epoch")
    parser.add_argument("--lr", type=float, default=2.5e-4,
                        help="Adam learning rate (annealed linearly to 0)")
    parser.add_argument("--gamma", type=float, default=0.99, help="discount factor")
    parser.add_argument("--gae-lambda", type=float, default=0.95, help="GAE lambda")
    parser.add_argument("--clip", type=float, default=0.2, help="PPO ratio clip range")
    parser.add_argument("--ent-coef", type=float, default=0.0, help="entropy bonus weight")
    parser.add_argument("--vf-coef", type=float, default=0.5, help="value loss weight")
    parser.add_argument("--max-grad-norm", type=float, default=0.5,
                        help="gradient norm clip")
    parser.add_argument("--hidden", type=int, default=64, help="units per hidden layer")
    parser.add_argument("--torch-threads", nargs="+", type=_threads,
                        default=[DEFAULT_THREADS, 1],
                        help=f"torch intra-op thread settings of the trainer, each a "
                             f"count or {DEFAULT_THREADS!r} (torch's own); every vector "
                             f"env runs under each, with a table each")
    parser.add_argument("--summarize", metavar="JSON", default=None,
                        help="train nothing: print the table (for --target-return) and "
                             "redraw the plot of a JSON this script wrote")
    return parser.parse_args(argv)


def main(argv: Optional[Sequence[str]] = None) -> None:
    args = parse_args(argv)
    if args.summarize:
        with open(args.summarize) as f:
            record = json.load(f)
        target = args.target_return if args.target_return is not None else \
            record["target_return"]
        runs, kinds = record["runs"], record["args"]["vector_env"]
        env, num_envs, seed = (record["args"][k] for k in ("env", "num_envs", "seed"))
        png = os.path.splitext(args.summarize)[0] + ".png"
        plot(runs, png, f"PPO on {env}, {num_envs} envs, seed {seed}")
        print(tables(runs, kinds, target, record["args"]["torch_threads"]))
        print(f"wrote {png}")
        return
    default_threads = torch.get_num_threads()
    target = args.target_return
    if target is None:
        target = gym.spec(args.env).reward_threshold
    os.makedirs(args.out, exist_ok=True)
    runs = []
    for repeat in range(args.repeats):  # round robin: load changes hit every vector env
        for setting in args.torch_threads:
            threads = default_threads if setting == DEFAULT_THREADS else setting
            torch.set_num_threads(threads)
            for kind in args.vector_env:
                run = dict(train(args, kind), repeat=repeat, torch_threads=threads,
                           torch_threads_setting=setting)
                runs.append(run)
                last = run["points"][-1][2] if run["points"] else float("nan")
                print(f"{kind} ({threads} torch threads): {run['env_steps']} env-steps in "
                      f"{run['wall_seconds']:.1f} s (start-up {run['startup_seconds']:.2f} "
                      f"s), {run['episodes']} episodes, final mean return {last:.1f}",
                      flush=True)
    stem = os.path.join(args.out, f"ppo_{args.env}")
    with open(stem + ".json", "w") as f:
        summary = [dict(summarize([run for run in runs if run["vector_env"] == kind
                                   and run["torch_threads_setting"] == setting], target),
                        torch_threads_setting=setting)
                   for setting in args.torch_threads for kind in args.vector_env]
        json.dump({"args": vars(args), "target_return": target, "runs": runs,
                   "summary": summary}, f, indent=1)
    plot(runs, stem + ".png", f"PPO on {args.env}, {args.num_envs} envs, seed {args.seed}")
    print(tables(runs, args.vector_env, target, args.torch_threads))
    print(f"wrote {stem}.json and {stem}.png")


if __name__ == "__main__":
    main()
