"""Which env snapshots a resumed run may unpickle: those signed with this user's own key.

A checkpoint's env snapshots (``Workers.resume_state()["envs"]``: each env worker's envs mid-episode)
are pickles, and unpickling runs whatever code the pickle names. Everything else in a checkpoint loads
with ``torch.load(weights_only=True)``, which runs none. So the runner signs the snapshots it saves
with an HMAC-SHA256 under a per-user key, and a resumed run unpickles them only when the signature
verifies with that key: a run folder from someone else (or one modified since) resumes with fresh
envs and a warning, unless ``runner.trust_checkpoint=true`` says to load it anyway.

The key is 32 random bytes, written as 64 hex digits into ``<cache>/keys/env-snapshot-hmac.key``
(``<cache>``: ``$EMBODIED_CACHE``, else ``~/.cache/embodied``) with mode 0600 when first needed; it is
never written into a run folder. A key file that others can read or write, or that another user
owns, is refused with the fix: anyone who can read it can sign a checkpoint that runs code here.

    key = signing_key()
    signature = sign(blobs, key)            # saved beside the blobs
    why_not = distrust(blobs, signature)    # None: safe to unpickle; else the reason
    saved = trusted(checkpoint_state["workers"], trust=False, checkpoint=path)  # without untrusted snapshots
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from embodied.config import ConfigError

KEY_FILE = "env-snapshot-hmac.key"
ALGORITHM = "hmac-sha256"
_DOMAIN = b"embodied env snapshots v1\0"  # a signature of these blobs means nothing for any other use of the key


class SigningKeyError(ConfigError):
    """The signing key file is unsafe or unreadable; the message names the file and the fix."""


def key_path() -> Path:
    """Where this user's key lives: ``$EMBODIED_CACHE/keys/`` (else ``~/.cache/embodied/keys/``)."""
    root = os.environ.get("EMBODIED_CACHE") or Path.home() / ".cache" / "embodied"
    return Path(root) / "keys" / KEY_FILE


def signing_key() -> bytes:
    """This user's key, created at first use (mode 0600, in a 0700 folder); refuses an unsafe key file."""
    path = key_path()
    if not path.exists():
        _create(path)
    info = path.stat()
    if info.st_uid != os.getuid():
        raise SigningKeyError(f"{path}: the env-snapshot signing key belongs to user id {info.st_uid}, not to you "
                              f"({os.getuid()}); whoever owns it can sign checkpoints that run code when you resume "
                              f"them. Fix: delete it (a new key is made; your older checkpoints then resume with "
                              f"fresh envs), or set EMBODIED_CACHE to a folder of your own")
    if info.st_mode & 0o077:
        raise SigningKeyError(f"{path}: the env-snapshot signing key is open to other users (mode "
                              f"{info.st_mode & 0o777:03o}); anyone who can read it can sign a checkpoint that runs "
                              f"code when you resume it. Fix: chmod 600 {path}")
    try:
        key = bytes.fromhex(path.read_text().strip())
    except (OSError, ValueError) as exc:
        raise SigningKeyError(f"{path}: not a signing key (64 hex digits): {exc}. Fix: delete it (a new key is made; "
                              f"checkpoints signed with the old one then resume with fresh envs)") from None
    if len(key) < 16:
        raise SigningKeyError(f"{path}: the signing key is {len(key)} bytes, too short. Fix: delete it")
    return key


def _create(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    # Written whole under a name of this process's own (mode 0600 from the first byte), then linked to ``path``,
    # which fails if it exists: two runs starting together agree on one key, and none reads a half-written one.
    tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32) + "\n")
    try:
        os.link(tmp, path)
    except FileExistsError:
        pass
    finally:
        tmp.unlink(missing_ok=True)


def key_id(key: bytes) -> str:
    """A short public name of a key (a hash of it): tells a user which key signed a checkpoint."""
    return hashlib.sha256(b"key id\0" + key).hexdigest()[:16]


def sign(blobs: Sequence[bytes], key: bytes) -> dict[str, str]:
    """The signature of ``blobs`` (in order) under ``key``: {algorithm, key id, digest}."""
    return {"algorithm": ALGORITHM, "key_id": key_id(key), "digest": _digest(blobs, key)}


def _digest(blobs: Sequence[bytes], key: bytes) -> str:
    mac = hmac.new(key, _DOMAIN, hashlib.sha256)
    for blob in blobs:  # length-prefixed: no two different lists of blobs give the same stream
        mac.update(len(blob).to_bytes(8, "big"))
        mac.update(blob)
    return mac.hexdigest()


def distrust(blobs: Sequence[bytes], signature: Any, key: bytes | None = None) -> str | None:
    """Why ``blobs`` must not be unpickled (None: ``signature`` verifies with this user's key)."""
    if not isinstance(signature, dict) or "digest" not in signature:
        return "they carry no signature (the checkpoint was written by an older embodied, or the signature removed)"
    if signature.get("algorithm") != ALGORITHM:
        return f"their signature is of an unknown kind ({signature.get('algorithm')!r})"
    key = signing_key() if key is None else key
    if not hmac.compare_digest(str(signature["digest"]), _digest(blobs, key)):
        if signature.get("key_id") != key_id(key):
            return (f"they were signed with another key (id {signature.get('key_id')}, yours at {key_path()} is "
                    f"{key_id(key)}): another user's or another machine's run")
        return "their signature does not match them: they were modified after the checkpoint was written"
    return None


def snapshot_blobs(envs: Sequence[Sequence[Any]]) -> list[bytes]:
    """The pickled snapshots in ``resume_state()["envs"]`` (per env worker, per stage), in order."""
    return [stage for rank in envs for stage in rank if isinstance(stage, bytes)]


def trusted(saved: dict[str, Any], trust: bool, checkpoint: Path | None) -> dict[str, Any]:
    """``saved`` (a checkpoint's ``workers``: ``resume_state()`` plus ``envs_signature``) without its env snapshots
    when they must not be unpickled (not signed with this user's key, and ``trust``, ``runner.trust_checkpoint``,
    off), with a warning that says why and how to trust them."""
    blobs = snapshot_blobs(saved.get("envs") or [])
    if not blobs:
        if trust:
            warnings.warn(f"runner.trust_checkpoint=true, but checkpoint {checkpoint} holds no env snapshots (its envs "
                          f"did not pickle, or it was not written by `embodied train`): there is nothing to trust; "
                          f"the envs restart from their seeds", stacklevel=3)
        return saved
    why = distrust(blobs, saved.get("envs_signature"))
    if why is None:
        return saved
    if trust:
        print(f"runner.trust_checkpoint=true: unpickling the env snapshots of {checkpoint} although {why}",
              file=sys.stderr, flush=True)
        return saved
    warnings.warn(f"runner.resume_from: the env snapshots in {checkpoint} are not loaded because {why}. Unpickling "
                  f"runs code, so only snapshots signed with your own key are loaded; the envs restart from their "
                  f"seeds instead (the policy, optimizer and counters resume as saved). If you trust this checkpoint "
                  f"(e.g. you wrote it on another machine), resume with runner.trust_checkpoint=true", stacklevel=3)
    return {k: v for k, v in saved.items() if k not in ("envs", "envs_signature")}
