"""A gymnasium training-style loop on ``FastVectorEnv``, synchronous and asynchronous.

``alf_env.vector.FastVectorEnv`` is a ``gymnasium.vector.VectorEnv``: code
written for ``gymnasium.vector.AsyncVectorEnv`` runs on it unchanged (the
synchronous loop below). With ``batch_size < num_envs`` it also runs
EnvPool-style (the asynchronous loop): ``recv()`` returns the first
``batch_size`` envs to finish, with their ids in ``info["env_id"]``, and
``send(actions, env_ids)`` steps those envs again, so slow envs do not hold up
the batch.

Both loops feed the same learner: a linear softmax policy on CartPole-v1,
trained with REINFORCE on whole episodes. An :class:`EpisodeCollector` turns
the stream of ``(env_ids, observations, actions, rewards, ends)`` into one
trajectory per env, which is how data from an asynchronous env must be
assembled. Autoreset is gymnasium's default, NEXT_STEP: the step after an
episode's end resets that env, and its action is ignored.

Run::

    python examples/gym_training_loop.py --mode both --num-envs 8 --steps 4000
"""

import argparse
import functools
import sys
import time
from typing import Dict, List, Optional, Sequence, Tuple

import gymnasium as gym
import numpy as np
import torch

from alf_env.vector import FastVectorEnv

ENV_ID = "CartPole-v1"


class EpisodeCollector:
    """Assembles per-env trajectories from batched, possibly out-of-order rows.

    Args:
        episodes_per_update: finished episodes that make one training batch.
    """

    def __init__(self, episodes_per_update: int) -> None:
        self.episodes_per_update = episodes_per_update
        self.returns: List[float] = []  # undiscounted return of each finished episode
        self._pending: Dict[int, Tuple[np.ndarray, int]] = {}  # env -> (obs, action)
        self._trajectories: Dict[int, List[Tuple[np.ndarray, int, float]]] = {}
        self._resetting: set = set()  # envs whose next step is an autoreset
        self._finished: List[List[Tuple[np.ndarray, int, float]]] = []

    def acted(self, env_ids: np.ndarray, observations: np.ndarray,
              actions: np.ndarray) -> None:
        """Records the actions chosen for ``env_ids`` on ``observations``."""
        for env_id, obs, action in zip(env_ids.tolist(), observations, actions.tolist()):
            self._pending[env_id] = (obs, action)

    def observed(self, env_ids: np.ndarray, rewards: np.ndarray, terminated: np.ndarray,
                 truncated: np.ndarray) -> None:
        """Records what the envs ``env_ids`` returned for their pending actions."""
        for i, env_id in enumerate(env_ids.tolist()):
            if env_id not in self._pending:
                continue  # the first observation after async_reset()
            obs, action = self._pending.pop(env_id)
            if env_id in self._resetting:  # NEXT_STEP autoreset: the action was ignored
                self._resetting.discard(env_id)
                continue
            trajectory = self._trajectories.setdefault(env_id, [])
            trajectory.append((obs, action, float(rewards[i])))
            if terminated[i] or truncated[i]:
                self._finished.append(trajectory)
                self.returns.append(sum(r for _, _, r in trajectory))
                self._trajectories[env_id] = []
                self._resetting.add(env_id)

    def take_batch(self) -> Optional[List[List[Tuple[np.ndarray, int, float]]]]:
        """The finished episodes once there are enough of them, else ``None``."""
        if len(self._finished) < self.episodes_per_update:
            return None
        batch, self._finished = self._finished, []
        return batch


class Learner:
    """A linear softmax policy trained with REINFORCE.

    Args:
        observation_size: length of an observation vector.
        num_actions: size of the discrete action space.
        seed: seeds the weights and the action sampling.
    """

    def __init__(self, observation_size: int, num_actions: int, seed: int = 0) -> None:
        torch.manual_seed(seed)
        self.policy = torch.nn.Linear(observation_size, num_actions)
        self.optimizer = torch.optim.Adam(self.policy.parameters(), lr=0.01)
        self.updates = 0

    def act(self, observations: np.ndarray) -> np.ndarray:
        """Samples one action per row of ``observations``."""
        with torch.no_grad():
            logits = self.policy(torch.as_tensor(observations, dtype=torch.float32))
            return torch.distributions.Categorical(logits=logits).sample().numpy()

    def update(self, episodes: List[List[Tuple[np.ndarray, int, float]]],
               gamma: float = 0.99) -> None:
        """One policy-gradient step on whole episodes."""
        observations, actions, returns = [], [], []
        for episode in episodes:
            running = 0.0
            episode_returns = []
            for _, _, reward in reversed(episode):
                running = reward + gamma * running
                episode_returns.append(running)
            returns += reversed(episode_returns)
            observations += [obs for obs, _, _ in episode]
            actions += [action for _, action, _ in episode]
        returns_t = torch.tensor(returns, dtype=torch.float32)
        returns_t = (returns_t - returns_t.mean()) / (returns_t.std() + 1e-6)
        logits = self.policy(torch.as_tensor(np.stack(observations), dtype=torch.float32))
        log_probs = torch.distributions.Categorical(logits=logits).log_prob(
            torch.as_tensor(actions))
        loss = -(log_probs * returns_t).mean()
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        self.updates += 1


def _learn(learner: Learner, collector: EpisodeCollector) -> None:
    batch = collector.take_batch()
    if batch is not None:
        learner.update(batch)


def run_sync(num_envs: int, steps: int, learner: Learner,
             collector: EpisodeCollector) -> int:
    """The gymnasium loop: ``reset`` once, then ``step`` all envs together.

    Returns:
        env-steps done.
    """
    env_fns = [functools.partial(gym.make, ENV_ID)] * num_envs
    env_ids = np.arange(num_envs)
    with FastVectorEnv(env_fns) as envs:
        observations, _ = envs.reset(seed=0)
        for _ in range(steps // num_envs):
            actions = learner.act(observations)
            collector.acted(env_ids, observations, actions)
            observations, rewards, terminated, truncated, _ = envs.step(actions)
            collector.observed(env_ids, rewards, terminated, truncated)
            _learn(learner, collector)
    return steps // num_envs * num_envs


def run_async(num_envs: int, steps: int, learner: Learner,
              collector: EpisodeCollector) -> int:
    """The EnvPool loop: ``recv`` the first half of the envs to finish, ``send`` them on.

    Returns:
        env-steps done.
    """
    env_fns = [functools.partial(gym.make, ENV_ID)] * num_envs
    batch_size = num_envs // 2
    with FastVectorEnv(env_fns, batch_size=batch_size) as envs:
        envs.async_reset()
        for _ in range(steps // batch_size):
            observations, rewards, terminated, truncated, info = envs.recv()
            env_ids = info["env_id"]  # which envs these rows came from
            collector.observed(env_ids, rewards, terminated, truncated)
            _learn(learner, collector)
            actions = learner.act(observations)
            collector.acted(env_ids, observations, actions)
            envs.send(actions, env_ids)
        envs.recv()  # collect the last batch in flight before closing
    return steps // batch_size * batch_size


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Parses the arguments and runs the loops."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=("sync", "async", "both"), default="both",
                        help="sync: reset/step (gymnasium API); async: EnvPool-style "
                             "async_reset/recv/send with half of the envs per batch; "
                             "both: one after the other (default)")
    parser.add_argument("--num-envs", type=int, default=8,
                        help="CartPole-v1 envs, one worker process each (default: 8)")
    parser.add_argument("--steps", type=int, default=4000,
                        help="env-steps per mode (default: 4000)")
    parser.add_argument("--episodes-per-update", type=int, default=8,
                        help="finished episodes per REINFORCE update (default: 8)")
    args = parser.parse_args(argv)
    if args.num_envs < 2:
        parser.error("--num-envs: the asynchronous loop needs at least 2 envs")
    probe = gym.make(ENV_ID)
    observation_size, num_actions = probe.observation_space.shape[0], probe.action_space.n
    probe.close()
    loops = {"sync": run_sync, "async": run_async}
    modes = list(loops) if args.mode == "both" else [args.mode]
    for mode in modes:
        learner = Learner(observation_size, int(num_actions))
        collector = EpisodeCollector(args.episodes_per_update)
        begin = time.perf_counter()
        env_steps = loops[mode](args.num_envs, args.steps, learner, collector)
        seconds = time.perf_counter() - begin
        recent = collector.returns[-20:]
        mean = sum(recent) / len(recent) if recent else float("nan")
        print(f"{mode}: {env_steps} env-steps in {seconds:.1f} s, "
              f"{len(collector.returns)} episodes, {learner.updates} updates, "
              f"mean return of the last {len(recent)}: {mean:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
