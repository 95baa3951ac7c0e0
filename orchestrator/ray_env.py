"""The environment perfwarden gives Ray, before Ray is imported: safe defaults (design §5, "Scale-out").

Ray 2.60 listens on the loopback only when a node's IP is exactly 127.0.0.1; any other node IP puts its
GCS, raylet, object manager and worker ports on every interface. Its token authentication is on by
default only for a cluster ``ray.init`` starts itself. So, unless the person running perfwarden set them:

- usage stats are off (``RAY_USAGE_STATS_ENABLED=0``): nothing is sent out;
- token authentication is on (``RAY_AUTH_MODE=token``): joining a cluster needs its token, and a cluster
  perfwarden starts requires it from every node and driver;
- a loopback address keeps its 127.0.0.1 (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``: otherwise Ray rewrites
  it to the host's outward IP and a node started with it would listen on all interfaces);
- the nodes perfwarden starts run their workers at the priority a run without a cluster has
  (``RAY_worker_niceness=0``; Ray's default is 15, and every server a step starts inherits it: measured at
  nice 15, a leg yields its cores to any process beside it, and its conditions are not those of the same
  command run alone). A node someone else started keeps its own setting, which its legs record
  (``process_conditions.nice``).

The token file is the secret: created 0600 when perfwarden creates it, tightened to 0600 when it is ours
and others could read it, refused when it is neither (:func:`private_token`).
"""

from __future__ import annotations

import ipaddress
import os
import secrets
import stat
from pathlib import Path

LOOPBACK = "127.0.0.1"
LOCAL = "local"
AUTH_MODE = "RAY_AUTH_MODE"
TOKEN = "RAY_AUTH_TOKEN"
TOKEN_PATH = "RAY_AUTH_TOKEN_PATH"
USAGE_STATS = "RAY_USAGE_STATS_ENABLED"
KEEP_LOOPBACK = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
"""Read once, when Ray is imported: "0" keeps 127.0.0.1 addresses and node IPs as they are."""
WORKER_NICENESS = "RAY_worker_niceness"
"""Read by a raylet when it starts: the nice value of the worker processes it launches."""
TOKEN_BYTES = 32


class ClusterError(RuntimeError):
    """The cluster cannot be reached, used safely, or has no slot for a step (one line, exit 3 at the CLI)."""


def is_loopback(address: str) -> bool:
    """Whether a Ray address (``local``, ``host:port``, ``ray://host:port``) names this machine's loopback."""
    if address == LOCAL:
        return True
    host = address.removeprefix("ray://").rpartition(":")[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: whatever it resolves to, it is not named as this machine's loopback
        return False


def prepare(address: str) -> None:
    """Set Ray's environment for joining ``address`` (before ``import ray``; what the person set stays)."""
    os.environ.setdefault(USAGE_STATS, "0")
    os.environ.setdefault(AUTH_MODE, "token")
    os.environ.setdefault(KEEP_LOOPBACK, "0" if is_loopback(address) else "1")
    # Only nodes started from this environment read it (``local``, ``perfwarden cluster``); a joined cluster's
    # raylets were started with their own.
    os.environ.setdefault(WORKER_NICENESS, "0")


def token_auth_on() -> bool:
    return os.environ.get(AUTH_MODE, "").lower() == "token"


def token_path() -> Path | None:
    """The file Ray reads its token from (None: the token is in ``RAY_AUTH_TOKEN`` itself)."""
    if os.environ.get(TOKEN):
        return None
    named = os.environ.get(TOKEN_PATH)
    return Path(named) if named else Path.home() / ".ray" / "auth_token"


def private_token(create: bool) -> Path | None:
    """Make sure the token Ray will use exists and only its owner can read it; returns its file.

    ``create``: a cluster perfwarden starts (``local``, ``perfwarden cluster``) gets a new random token when
    there is none, written 0600 from the start. Joining a cluster never invents one: the cluster's token
    must be there. A token file of ours that others can read is tightened to 0600; one that is not ours and
    readable by others is refused (the secret is already out)."""
    if not token_auth_on():
        return None
    path = token_path()
    if path is None:
        return None
    try:
        info = path.lstat()
    except FileNotFoundError:
        if not create:
            raise ClusterError(f"Ray token authentication is on and there is no token at {str(path)!r}: copy the "
                               f"cluster's token there (mode 0600) or name its file in {TOKEN_PATH} "
                               "(docs/scaling-out.md)") from None
        return _new_token(path)
    except OSError as exc:
        raise ClusterError(f"cannot read the Ray token file {str(path)!r}: {exc}") from None
    if not stat.S_ISREG(info.st_mode):
        raise ClusterError(f"the Ray token file {str(path)!r} is not a regular file")
    if info.st_mode & 0o077:
        if info.st_uid != os.getuid():
            raise ClusterError(f"the Ray token file {str(path)!r} is readable by others and not ours to fix: "
                               "make it 0600")
        _tighten(path)
    return path


def _tighten(path: Path) -> None:
    """chmod 0600 through a descriptor opened without following links (the file checked is the one changed)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        raise ClusterError(f"cannot make the Ray token file {str(path)!r} private: {exc}") from None
    try:
        os.fchmod(fd, 0o600)
    finally:
        os.close(fd)


def _new_token(path: Path) -> Path:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:  # created meanwhile (another perfwarden or Ray): check that one instead
        return private_token(create=False) or path
    except OSError as exc:
        raise ClusterError(f"cannot create the Ray token file {str(path)!r}: {exc}") from None
    with os.fdopen(fd, "w", encoding="ascii") as handle:
        handle.write(secrets.token_hex(TOKEN_BYTES))
    return path
