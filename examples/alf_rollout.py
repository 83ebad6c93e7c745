"""An ALF-style rollout loop on ``FastParallelEnvironment``.

ALF trainers unroll a batched environment for a fixed number of steps, feed
each ``TimeStep`` to the policy, and train on the collected experience. This
example does exactly that with gymnasium's CartPole-v1 in worker processes
(shared memory for steps and resets), with a small torch policy and a
REINFORCE-style update, so that every part of a real loop is there:

* ``create_environment`` builds the batched env (``FastParallelEnvironment``
  when the native module is available) and seeds env ``i`` with ``seed * n + i``;
* ``reset()`` / ``step(action)`` take and return batched torch ``TimeStep``s;
  episodes auto-reset (the step after ``LAST`` is ``FIRST``);
* ``time_step.env_id`` tells which env produced each row.

Run::

    python examples/alf_rollout.py --num-envs 8 --unroll-length 32 --iterations 20
"""

import argparse
import sys
from typing import List, Optional, Sequence, Tuple

import torch

from alf_env.data_structures import StepType, TimeStep
from alf_env.environments.fast_parallel_environment import FastParallelEnvironment
from alf_env.environments.utils import create_environment


class Policy(torch.nn.Module):
    """A linear softmax policy over a discrete action space."""

    def __init__(self, observation_size: int, num_actions: int) -> None:
        super().__init__()
        self.logits = torch.nn.Linear(observation_size, num_actions)

    def forward(self, observation: torch.Tensor) -> torch.distributions.Categorical:
        return torch.distributions.Categorical(logits=self.logits(observation))


def unroll(env: FastParallelEnvironment, policy: Policy, time_step: TimeStep,
           length: int) -> Tuple[TimeStep, List[TimeStep], List[torch.Tensor]]:
    """Steps ``env`` ``length`` times; returns the last time step and the experience.

    Returns:
        the time step to continue from, the ``length`` time steps the actions
        were chosen on, and the actions.
    """
    time_steps, actions = [], []
    with torch.no_grad():
        for _ in range(length):
            action = policy(time_step.observation).sample()
            time_steps.append(time_step)
            actions.append(action)
            time_step = env.step(action.to(torch.int64))
    return time_step, time_steps, actions


def discounted_returns(rewards: torch.Tensor, starts: torch.Tensor,
                       gamma: float) -> torch.Tensor:
    """Rewards-to-go within each episode; ``starts[t]`` marks a new episode at t.

    Args:
        rewards: ``[T, B]`` reward received after the action at ``t``.
        starts: ``[T, B]`` bool, the time step at ``t`` is FIRST.
        gamma: discount.
    """
    returns = torch.zeros_like(rewards)
    running = torch.zeros_like(rewards[0])
    for t in reversed(range(rewards.shape[0])):
        # An episode starting at t + 1 does not pay back to t.
        if t + 1 < rewards.shape[0]:
            running = torch.where(starts[t + 1], torch.zeros_like(running), running)
        running = rewards[t] + gamma * running
        returns[t] = running
    return returns


def train(num_envs: int, unroll_length: int, iterations: int, seed: int = 0,
          start_method: str = "fork") -> List[float]:
    """Runs the loop; returns the undiscounted return of every finished episode."""
    torch.manual_seed(seed)
    env = create_environment("CartPole-v1", num_parallel_environments=num_envs,
                             parallel_environment_ctor=FastParallelEnvironment,
                             seed=seed, start_method=start_method)
    finished: List[float] = []
    with env:
        observation_size = env.observation_spec().shape[0]
        num_actions = int(env.action_spec().maximum) + 1
        policy = Policy(observation_size, num_actions)
        optimizer = torch.optim.Adam(policy.parameters(), lr=0.01)
        episode_return = torch.zeros(env.batch_size)
        time_step = env.reset()
        for iteration in range(iterations):
            time_step, time_steps, actions = unroll(env, policy, time_step, unroll_length)
            # The reward of an action arrives with the next time step.
            following = time_steps[1:] + [time_step]
            rewards = torch.stack([ts.reward for ts in following])
            starts = torch.stack([ts.step_type == StepType.FIRST for ts in time_steps])
            for ts in following:  # bookkeeping of finished episodes, per env
                episode_return += ts.reward * (ts.step_type != StepType.FIRST)
                for env_id in ts.env_id[ts.is_last()].tolist():
                    finished.append(float(episode_return[env_id]))
                    episode_return[env_id] = 0.0
            # A LAST time step's action leads to a reset, not to a reward: mask it.
            valid = torch.stack([~ts.is_last() for ts in time_steps]).float()
            returns = discounted_returns(rewards, starts, gamma=0.99)
            returns = (returns - returns.mean()) / (returns.std() + 1e-6)
            observations = torch.stack([ts.observation for ts in time_steps])
            log_probs = policy(observations).log_prob(torch.stack(actions))
            loss = -(log_probs * returns * valid).sum() / valid.sum()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            recent = finished[-20:]
            mean = sum(recent) / len(recent) if recent else float("nan")
            print(f"iteration {iteration + 1:3d}: {len(finished):4d} episodes, "
                  f"mean return of the last {len(recent)}: {mean:6.1f}")
    return finished


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Parses the arguments and runs :func:`train`."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-envs", type=int, default=8,
                        help="CartPole-v1 envs, one worker process each (default: 8)")
    parser.add_argument("--unroll-length", type=int, default=32,
                        help="steps of the batched env per iteration (default: 32)")
    parser.add_argument("--iterations", type=int, default=20,
                        help="unroll-then-train iterations (default: 20)")
    parser.add_argument("--start-method", default="fork",
                        choices=("fork", "spawn", "forkserver"),
                        help="how the worker processes start (default: fork)")
    args = parser.parse_args(argv)
    episodes = train(args.num_envs, args.unroll_length, args.iterations,
                     start_method=args.start_method)
    print(f"done: {len(episodes)} episodes finished")
    return 0


if __name__ == "__main__":
    sys.exit(main())
