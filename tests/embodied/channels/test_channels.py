"""Channel contract, checked on both backends (in-process and Ray actor)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from embodied.channels import Channel, ChannelTimeout, LocalChannel, RayChannel


@dataclass
class ObsShard:
    """Stand-in for the observation payload env workers send."""

    env_ids: np.ndarray
    pixels: np.ndarray
    reward: float


@pytest.fixture(params=["local", pytest.param("ray", marks=pytest.mark.ray)])
def channel(request: pytest.FixtureRequest) -> Iterator[Channel]:
    """A fresh, empty channel of each backend."""
    if request.param == "local":
        yield LocalChannel("obs")
        return
    request.getfixturevalue("ray_session")
    ray_channel = RayChannel.create("obs")
    # Wait for the channel's actor process to be up (seconds on a loaded machine): the tests time the channel,
    # not Ray starting a process.
    with pytest.raises(ChannelTimeout):
        ray_channel.get("not-there", timeout=0)
    yield ray_channel
    ray_channel.close()


def test_satisfies_protocol(channel: Channel) -> None:
    assert isinstance(channel, Channel)
    assert channel.name == "obs"


def test_fifo_per_key(channel: Channel) -> None:
    for i in range(10):
        channel.put("a", i)
    assert channel.qsize("a") == 10
    assert [channel.get("a", timeout=5) for _ in range(10)] == list(range(10))
    assert channel.qsize("a") == 0


def test_keys_are_independent(channel: Channel) -> None:
    channel.put("a", "a0")
    channel.put("b", "b0")
    channel.put("a", "a1")
    assert channel.qsize("never-used") == 0
    assert channel.get("b", timeout=5) == "b0"
    assert channel.get("a", timeout=5) == "a0"
    assert channel.get("a", timeout=5) == "a1"
    with pytest.raises(ChannelTimeout):
        channel.get("b", timeout=0.05)


def test_discard_drops_a_keys_items_and_leaves_the_others(channel: Channel) -> None:
    channel.put("old", "left behind by a failed worker")
    channel.put("new", "n0")
    channel.discard("old")
    channel.discard("never-used")
    deadline = time.monotonic() + 10  # Ray: the directory forgets without the caller waiting
    while channel.qsize("old"):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert channel.get("new", timeout=5) == "n0"


def test_get_blocks_until_another_thread_puts(channel: Channel) -> None:
    def produce() -> None:
        time.sleep(0.2)
        channel.put("late", 42)

    producer = threading.Thread(target=produce)
    start = time.monotonic()
    producer.start()
    assert channel.get("late", timeout=10) == 42
    assert time.monotonic() - start >= 0.15
    producer.join()


def test_timeout_raises_naming_channel_and_key(channel: Channel) -> None:
    start = time.monotonic()
    with pytest.raises(ChannelTimeout, match=r"channel 'obs'.*key 'missing'.*0\.1") as info:
        channel.get("missing", timeout=0.1)
    assert 0.08 <= time.monotonic() - start < 5
    assert isinstance(info.value, TimeoutError)
    assert (info.value.channel, info.value.key, info.value.timeout) == ("obs", "missing", 0.1)


def test_zero_timeout_returns_a_ready_item(channel: Channel) -> None:
    channel.put("k", "ready")
    assert channel.get("k", timeout=0) == "ready"
    with pytest.raises(ValueError, match="timeout"):
        channel.get("k", timeout=-1)


def test_async_twins(channel: Channel) -> None:
    async def main() -> None:
        # The getter waits first; the putter can only run if aget leaves the loop free.
        getter = asyncio.create_task(channel.aget("k", timeout=10))
        await asyncio.sleep(0.05)
        for i in range(3):
            await channel.aput("k", i)
        assert await getter == 0
        assert [await channel.aget("k", timeout=5) for _ in range(2)] == [1, 2]
        with pytest.raises(ChannelTimeout, match="'k'"):
            await channel.aget("k", timeout=0.05)

    asyncio.run(main())


def test_arrays_and_dataclasses_round_trip(channel: Channel) -> None:
    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 255, size=(8, 64, 64, 3), dtype=np.uint8)  # ~100 KB
    actions = rng.standard_normal((8, 7)).astype(np.float32)
    shard = ObsShard(env_ids=np.arange(3, 11), pixels=pixels, reward=1.5)
    channel.put("obs", shard)
    channel.put("act", actions)

    got = channel.get("obs", timeout=5)
    assert isinstance(got, ObsShard) and got.reward == 1.5
    np.testing.assert_array_equal(got.env_ids, np.arange(3, 11))
    np.testing.assert_array_equal(got.pixels, pixels)
    assert got.pixels.dtype == np.uint8
    got_actions = channel.get("act", timeout=5)
    assert got_actions.dtype == np.float32
    np.testing.assert_array_equal(got_actions, actions)


@pytest.mark.ray
def test_ray_channel_travels_into_remote_task(ray_session: None) -> None:
    import ray

    # Defined here so cloudpickle ships it by value (workers cannot import test modules).
    @ray.remote(num_cpus=1)
    def produce(chan: RayChannel, n: int) -> str:
        for i in range(n):
            chan.put(f"env-{i % 2}", np.full((4, 4), i, dtype=np.float32))
        return chan.name

    chan = RayChannel.create("cross")
    try:
        assert ray.get(produce.remote(chan, 6), timeout=60) == "cross"
        for key, values in (("env-0", [0, 2, 4]), ("env-1", [1, 3, 5])):
            got = [chan.get(key, timeout=5) for _ in values]
            assert [int(a[0, 0]) for a in got] == values
    finally:
        chan.close()


@pytest.mark.ray
def test_closed_ray_channel_fails(ray_session: None) -> None:
    import ray

    chan = RayChannel.create("closing")
    chan.put("k", 1)
    chan.close()
    with pytest.raises(ray.exceptions.RayActorError):
        chan.get("k", timeout=5)


def test_import_does_not_import_ray() -> None:
    code = "import sys, embodied.channels; assert 'ray' not in sys.modules"
    root = Path(__file__).resolve().parents[3]
    subprocess.run([sys.executable, "-c", code], check=True, cwd=root)


@pytest.mark.ray
def test_mailbox_actors_receive_straight_from_producers_in_order(ray_session: None) -> None:
    """Items parked before the consumer claims its key, then delivered directly; order kept throughout.

    Once the producer knows the consumer, the directory actor is not on the path: items put after it
    is gone still arrive.
    """
    import ray

    from embodied.channels.mailbox import mailbox_actor

    class Consumer:
        def __init__(self, chan: RayChannel) -> None:
            self.chan = chan

        def take(self, key: str, n: int) -> list:
            return [self.chan.get(key, timeout=30) for _ in range(n)]

    class Producer:
        def __init__(self, chan: RayChannel) -> None:
            self.chan = chan

        def send(self, key: str, start: int, n: int, size: int = 1) -> None:
            for i in range(start, start + n):
                self.chan.put(key, np.full(size, i, dtype=np.int64))

        def knows_consumer(self, key: str) -> bool:
            return self.chan._consumer(key) is not None  # (advances the lookup that puts start)

    chan = RayChannel.create("mail")
    consumer = mailbox_actor(Consumer, num_cpus=0).remote(chan)
    producer = mailbox_actor(Producer, num_cpus=0).remote(chan)
    ray.get(producer.send.remote("k", 0, 50))  # nobody has claimed "k": parked in the directory
    taking = consumer.take.remote("k", 100)  # claims "k": the parked 50 first
    ray.get(producer.send.remote("k", 50, 50, 100_000))  # 800 kB each: through the object store
    assert [int(a[0]) for a in ray.get(taking, timeout=60)] == list(range(100))
    deadline = time.monotonic() + 30
    while not ray.get(producer.knows_consumer.remote("k")):  # the producer's lookup completes
        assert time.monotonic() < deadline
        time.sleep(0.05)
    chan.close()
    ray.get(producer.send.remote("k", 100, 20))
    assert [int(a[0]) for a in ray.get(consumer.take.remote("k", 20), timeout=60)] == list(range(100, 120))
