"""Checkpoints from someone else: env snapshots are unpickled only when signed with this user's key.

A crafted checkpoint carries a pickle that would create a file when unpickled (``os.system("touch
...")``); resuming it, initialising a policy from it and evaluating it must leave no such file.
"""

from __future__ import annotations

import ast
import os
import pickle
import stat
from pathlib import Path

import pytest
import torch

import embodied.runs.train as runner
from embodied.checkpoint.store import MANIFEST_FILE, TRAINER_FILE, check_init_from, load_checkpoint, write_manifest
from embodied.checkpoint.trust import SigningKeyError, distrust, key_path, sign, signing_key
from embodied.config import ConfigError, load_config
from embodied.evaluation.run import evaluate_checkpoint

COUNTING = "tests.toy_envs:CountingEnv"
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch) -> Path:
    """A fresh user cache (and so a fresh signing key) for each test."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("EMBODIED_CACHE", str(cache))
    return cache


def toy_config(out: Path, *overrides: str):
    return load_config(None, [
        f"env.id={COUNTING}", "env.num_envs=2", "env.max_episode_steps=6", "eval_env.num_envs=2",
        "env.preflight=false", "policy.type=mlp", "policy.hidden_sizes=[8]", "policy.action_chunk=2", "rollout.chunk_steps=2",
        "algorithm.num_minibatches=1", "algorithm.update_epochs=1", "runner.iterations=1", "runner.eval_every=0",
        "runner.eval_episodes=2", "logger.backends=[console]", "logger.progress_bar=false", "runner.plot=false",
        f"experiment.output_dir={out}", *overrides,
    ])


class Touch:
    """Unpickled, it runs ``touch <path>``: what a malicious checkpoint would do (anything at all)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):
        return os.system, (f"touch {self.path}",)


def rewrite(checkpoint: Path, edit) -> None:
    """Change a checkpoint's trainer state and redo its checksums, as whoever crafts one can."""
    state = torch.load(checkpoint / TRAINER_FILE, weights_only=True)
    edit(state)
    torch.save(state, checkpoint / TRAINER_FILE)
    (checkpoint / MANIFEST_FILE).unlink()
    write_manifest(checkpoint, state)


def test_the_key_is_made_once_with_mode_0600_in_the_users_cache_never_in_the_run_folder(tmp_path, own_cache):
    result = runner.train(toy_config(tmp_path / "runs"))
    path = key_path()
    assert path == own_cache / "keys" / "env-snapshot-hmac.key"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    key = signing_key()
    assert len(key) == 32 and signing_key() == key  # made once
    saved = load_checkpoint(result.checkpoint)["workers"]
    assert saved["envs_signature"]["algorithm"] == "hmac-sha256"
    assert distrust([b for rank in saved["envs"] for b in rank], saved["envs_signature"]) is None
    hex_key = key.hex().encode()
    assert not [p for p in result.run_dir.rglob("*") if p.is_file() and hex_key in p.read_bytes()]


def test_a_crafted_checkpoint_whose_pickle_would_write_a_file_does_not_write_it(tmp_path, recwarn):
    first = runner.train(toy_config(tmp_path / "runs", "runner.iterations=1"))
    target = tmp_path / "pwned"
    payload = pickle.dumps(Touch(target))

    def craft(state: dict) -> None:
        state["workers"]["envs"] = [[payload]]  # signature left as it was: it no longer matches
    rewrite(first.checkpoint, craft)

    with pytest.warns(UserWarning, match="not loaded because their signature does not match them") as warned:
        resumed = runner.train(toy_config(tmp_path / "runs", "runner.iterations=2",
                                          f"runner.resume_from={first.checkpoint}"))
    assert "resume with runner.trust_checkpoint=true" in next(str(w.message) for w in warned if "not loaded" in str(w.message))
    assert resumed.history and not target.exists()  # resumed, with fresh envs
    check_init_from(str(first.checkpoint), toy_config(tmp_path).policy)  # policy.init_from reads it ...
    evaluate_checkpoint(toy_config(tmp_path), first.checkpoint, 2, tmp_path / "eval")  # ... and embodied eval
    assert not target.exists()

    evil = tmp_path / "evil"  # a checkpoint whose trainer.pt itself holds the pickle: refused outright
    evil.mkdir()
    torch.save({"iteration": 1, "env_steps": 0, "actor": {}, "oops": Touch(target)}, evil / TRAINER_FILE)
    with pytest.raises(ConfigError, match="not a readable checkpoint"):
        runner.train(toy_config(tmp_path / "runs", "runner.iterations=2", f"runner.resume_from={evil}"))
    with pytest.raises(ValueError, match="not a readable checkpoint"):
        check_init_from(str(evil), toy_config(tmp_path).policy)
    assert not target.exists()

    pickle.loads(payload)  # the control: the payload is live, it was never unpickled above
    assert target.exists()


def test_another_users_checkpoint_resumes_with_fresh_envs_unless_trusted(tmp_path, monkeypatch, recwarn):
    monkeypatch.setenv("EMBODIED_CACHE", str(tmp_path / "someone-else"))
    theirs = runner.train(toy_config(tmp_path / "runs"))
    monkeypatch.setenv("EMBODIED_CACHE", str(tmp_path / "me"))
    resume = f"runner.resume_from={theirs.checkpoint}"
    with pytest.warns(UserWarning, match="not loaded because they were signed with another key"):
        runner.train(toy_config(tmp_path / "runs", "runner.iterations=2", resume))
    recwarn.clear()
    runner.train(toy_config(tmp_path / "runs", "runner.iterations=3", resume, "runner.trust_checkpoint=true"))
    assert not [w for w in recwarn if "not loaded" in str(w.message) or "not exact" in str(w.message)]


def test_trust_checkpoint_on_a_checkpoint_without_env_snapshots_says_there_is_nothing_to_trust(tmp_path):
    first = runner.train(toy_config(tmp_path / "runs"))

    def unsaved(state: dict) -> None:
        state["workers"]["envs"] = [["SomeVectorEnv has no get_state()"]]
    rewrite(first.checkpoint, unsaved)
    with pytest.warns(UserWarning, match="runner.trust_checkpoint=true, but checkpoint .* holds no env snapshots"):
        runner.train(toy_config(tmp_path / "runs", "runner.iterations=2", f"runner.resume_from={first.checkpoint}",
                                "runner.trust_checkpoint=true"))


def test_a_key_file_open_to_others_is_refused_with_the_fix(tmp_path):
    signing_key()
    path = key_path()
    path.chmod(0o644)
    with pytest.raises(SigningKeyError, match=f"mode 644.*Fix: chmod 600 {path}"):
        signing_key()
    with pytest.raises(ConfigError, match="chmod 600"):  # a run stops before it makes a run folder
        runner.train(toy_config(tmp_path / "runs"))
    assert not (tmp_path / "runs").exists()
    path.chmod(0o600)
    assert len(signing_key()) == 32


def test_a_signature_tells_a_modified_blob_from_another_key():
    key, other = b"k" * 32, b"o" * 32
    signature = sign([b"a", b"bc"], key)
    assert distrust([b"a", b"bc"], signature, key) is None
    assert "modified" in distrust([b"ab", b"c"], signature, key)  # framing: not the same stream of blobs
    assert "another key" in distrust([b"a", b"bc"], signature, other)
    assert "no signature" in distrust([b"a"], None, key)


def test_checkpoints_are_read_without_unpickling_anywhere_but_the_signed_env_snapshots():
    """Every torch.load passes weights_only=True; pickle.load(s) appears only where env snapshots are put
    back (after ``embodied.checkpoint.trust.trusted`` let them through, or within a run, from its own memory)."""
    unpickling = {}
    for folder in ("embodied", "envs", "policies"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ClassDef) and "pickle.Unpickler" in map(ast.unparse, node.bases):
                    unpickling.setdefault(str(path.relative_to(ROOT)), []).append("pickle.Unpickler")
                if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
                    continue
                name = f"{ast.unparse(node.func.value)}.{node.func.attr}"
                if name == "torch.load":
                    safe = [k for k in node.keywords if k.arg == "weights_only" and ast.unparse(k.value) == "True"]
                    assert safe, f"{path}:{node.lineno}: torch.load without weights_only=True"
                if name in ("pickle.load", "pickle.loads", "pickles.loads", "np.load", "numpy.load"):
                    allowed = [k for k in node.keywords if k.arg == "allow_pickle"]
                    if name.endswith("load") and "np" in name and not allowed:
                        continue  # np.load refuses pickles by default
                    unpickling.setdefault(str(path.relative_to(ROOT)), []).append(name)
    assert unpickling == {"embodied/core/pickles.py": ["pickle.Unpickler"],  # pickles.loads: moved modules mapped
                          "embodied/workers/env_worker.py": ["pickles.loads", "pickles.loads"],
                          "envs/chunked.py": ["pickles.loads"],  # set_state: reached only through env_worker's
                          "envs/mujoco_batched.py": ["pickles.loads"],  # likewise (the batched built-in tasks)
                          "envs/adapters/maniskill/batched.py": ["pickles.loads"]}  # likewise (ManiSkill on CUDA)
