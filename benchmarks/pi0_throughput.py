"""π0 (policy.type: pi0) throughput on the tiny config, side by side in one process:

- our ``act`` (the recorded Euler loop) against transformers' ``sample_actions`` on the same batch;
- ``evaluate`` (every Flow-Noise step in one batched expert pass) against scoring the steps one pass each;
- one PPO step (evaluate + clipped loss + backward + Adam) at batch 8 / 32 / 128.

    python benchmarks/pi0_throughput.py [--repeats 5] [--threads 2] [--act-batches 1 32] [--ppo-batches 8 32 128]
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
import torch

from embodied.policies.flow_logprob import CHAIN, euler_times, gaussian_logp, step_distribution
from embodied.policies.pi0.configuration import PI0PolicyConfig
from embodied.policies.pi0.modeling import PI0Policy
from embodied.policy.base import PolicySpec

SPEC = PolicySpec(state_dim=8, image_shape=(64, 64, 3), action_dim=7, action_low=(-1.0,) * 7,
                  action_high=(1.0,) * 7, wrist_image_shape=(64, 64, 3))


def observations(batch: int) -> dict:
    rng = np.random.default_rng(0)
    return {"main_images": rng.integers(0, 255, (batch, 64, 64, 3), dtype=np.uint8),
            "wrist_images": rng.integers(0, 255, (batch, 64, 64, 3), dtype=np.uint8),
            "states": rng.standard_normal((batch, 8)).astype(np.float32),
            "task_descriptions": ["pick up the red cube"] * batch}


def best_ms(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1000 * min(times)


def paired_ms(first, second, repeats: int) -> tuple[float, float]:
    """Best-of times of two calls run in turn (first, second, first, ...), so load that comes and goes on a shared
    machine falls on both alike."""
    first(), second()  # warm-up
    a, b = [], []
    for _ in range(repeats):
        for fn, times in ((first, a), (second, b)):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    return 1000 * min(a), 1000 * min(b)


def sequential_logp(policy: PI0Policy, inputs: dict) -> torch.Tensor:
    """The Flow-Noise log-prob scored one expert pass per step (a fresh prefix each), for comparison."""
    chain = inputs[CHAIN]
    times, total = euler_times(policy.steps, chain.device), 0.0
    for k in range(policy.steps):
        prefix = policy._prefix(inputs)
        t = times[k].expand(chain.shape[0])
        v, features = policy._velocity(prefix)(chain[:, k], t, 1)
        mean, std = step_distribution(policy.logprob, chain[:, k], v, features, t, 1 / policy.steps,
                                      torch.ones(chain.shape[0], dtype=torch.bool), policy.scored)
        total = total + gaussian_logp(chain[:, k + 1], mean, std)
    return total


def main(argv: list[str] | None = None) -> dict[str, list[tuple[int, float, float]]]:
    """Print the figures; return them: ``act`` (batch, ours ms, sample_actions ms) and ``evaluate`` (batch,
    batched ms, per-step ms) and ``ppo`` (batch, step ms, max |ratio - 1| before the step)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--act-batches", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--ppo-batches", type=int, nargs="+", default=[8, 32, 128])
    args = parser.parse_args(argv)
    result: dict[str, list[tuple[int, float, float]]] = {"act": [], "evaluate": [], "ppo": []}
    torch.set_num_threads(args.threads)
    warnings.simplefilter("ignore", UserWarning)
    policy = PI0Policy(PI0PolicyConfig(action_chunk=4, flow_steps=4, flow_logprob="noise"), SPEC)
    print(policy.describe())
    print(f"CPU, {args.threads} threads, best of {args.repeats}")
    for batch in args.act_batches:
        obs = observations(batch)
        out = policy.act(obs, deterministic=True)
        p = policy._prompt_inputs(out.forward_inputs)
        state, noise = policy._state(out.forward_inputs), out.forward_inputs[CHAIN][:, 0]
        ours, theirs = paired_ms(
            lambda: policy.act(obs, deterministic=True),
            lambda: policy.model.sample_actions(state=state, noise=noise, num_steps=policy.steps, **p), args.repeats)
        print(f"act, batch {batch:3d}: ours {ours:7.1f} ms, sample_actions {theirs:7.1f} ms, "
              f"throughput ratio {theirs / ours:.2f}x (ours includes the prompt, images and value head)")
        result["act"].append((batch, ours, theirs))
    for batch in args.ppo_batches:
        out = policy.act(observations(batch))
        inputs = out.forward_inputs
        optimizer = torch.optim.Adam([q for q in policy.parameters() if q.requires_grad], lr=1e-5)

        def ppo_step() -> None:
            logprobs, _, values = policy.evaluate(inputs, out.actions)
            ratio = (logprobs - out.logprobs).exp()
            loss = -torch.min(ratio, ratio.clamp(0.8, 1.2)).mean() + values.pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

        with torch.no_grad():
            ratio_error = float((policy.evaluate(inputs, out.actions)[0] - out.logprobs).exp().sub(1).abs().max())
            batched, sequential = paired_ms(lambda: policy.evaluate(inputs, out.actions),
                                            lambda: sequential_logp(policy, inputs), args.repeats)
        step = best_ms(ppo_step, args.repeats)
        print(f"batch {batch:3d}: evaluate batched {batched:7.1f} ms vs one pass per step {sequential:7.1f} ms "
              f"({sequential / batched:.2f}x); PPO step {step:7.1f} ms; max|ratio-1| {ratio_error:.1e}")
        result["evaluate"].append((batch, batched, sequential))
        result["ppo"].append((batch, step, ratio_error))
    return result


if __name__ == "__main__":
    main()
