"""Where the coordinator is and which credentials to use, resolved exactly as
the yoke CLI resolves them (client/client.cc, client/cluster_state.cc):

address: the argument, else $YOKE_COORDINATOR, else the address in the state
  file of a running `yoke up` cluster, else 127.0.0.1:7070.
credentials: insecure=True or YOKE_INSECURE=1: plaintext; else TLS with the
  directory (ca.crt, and tls.crt/tls.key if present) of the argument, else
  $YOKE_TLS_DIR, else the `yoke up` cluster's admin directory (a cluster
  started --insecure recorded none: plaintext); plus the bearer token of the
  argument or $YOKE_TOKEN, if any.
The state file: $YOKE_STATE_DIR/cluster.json, else
  $XDG_RUNTIME_DIR/yoke/cluster.json, else /tmp/yoke-up-$UID/cluster.json.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass
from typing import Any, Optional

import grpc

from .errors import error_for

DEFAULT_ADDRESS = "127.0.0.1:7070"


@dataclass(frozen=True)
class ClusterState:
    """What `yoke up` recorded about its cluster (the fields a client uses)."""

    address: str
    tls_dir: str


def state_path() -> str:
    d = os.environ.get("YOKE_STATE_DIR", "")
    if d:
        return os.path.join(d, "cluster.json")
    d = os.environ.get("XDG_RUNTIME_DIR", "")
    if d:
        return os.path.join(d, "yoke", "cluster.json")
    return f"/tmp/yoke-up-{os.getuid()}/cluster.json"


def read_state(path: Optional[str] = None) -> Optional[ClusterState]:
    """The state file, or None when there is none or it is not one the CLI
    would accept (no address, no positive coordinator_pid)."""
    try:
        with open(path or state_path(), encoding="utf-8") as f:
            data: Any = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    address = data.get("address")
    pid = data.get("coordinator_pid")
    if not isinstance(address, str) or not address:
        return None
    if not isinstance(pid, (int, float)) or isinstance(pid, bool) or pid <= 0:
        return None
    tls_dir = data.get("tls_dir")
    return ClusterState(address=address, tls_dir=tls_dir if isinstance(tls_dir, str) else "")


def resolve_address(address: Optional[str]) -> str:
    if address:
        return address
    env = os.environ.get("YOKE_COORDINATOR", "")
    if env:
        return env
    st = read_state()
    return st.address if st else DEFAULT_ADDRESS


@dataclass(frozen=True)
class Resolved:
    """The outcome of credential resolution; no secret is kept here."""

    tls_dir: str  # "" for plaintext
    has_token: bool


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise error_for(grpc.StatusCode.NOT_FOUND, f"tls_dir: cannot read {path}: {e.strerror}")


def resolve_credentials(tls_dir: Optional[str], token: Optional[str],
                        insecure: bool) -> "tuple[Optional[grpc.ChannelCredentials], Resolved]":
    """Channel credentials (None: plaintext) and what was chosen."""
    if insecure or os.environ.get("YOKE_INSECURE", "") == "1":
        return None, Resolved("", False)
    d = tls_dir or os.environ.get("YOKE_TLS_DIR", "")
    tok = token or os.environ.get("YOKE_TOKEN", "")
    if not d:
        st = read_state()
        if st is not None and not st.tls_dir:
            return None, Resolved("", False)
        if st is not None:
            d = st.tls_dir
    if not d:
        raise error_for(
            grpc.StatusCode.FAILED_PRECONDITION,
            "no credentials for the coordinator: pass tls_dir=DIR (ca.crt, tls.crt, tls.key from "
            "`yoke certs issue`) or set $YOKE_TLS_DIR, add token= (or $YOKE_TOKEN) for a bearer "
            "token, or insecure=True for a coordinator that runs --insecure")
    ca = _read(os.path.join(d, "ca.crt"))
    crt_path, key_path = os.path.join(d, "tls.crt"), os.path.join(d, "tls.key")
    key: Optional[bytes] = None
    chain: Optional[bytes] = None
    if os.path.exists(crt_path) or os.path.exists(key_path):
        try:
            mode = os.stat(key_path).st_mode
        except OSError:
            mode = 0
        if mode & (stat.S_IRWXO):
            raise error_for(grpc.StatusCode.PERMISSION_DENIED,
                            f"tls_dir: {key_path}: readable by others (mode "
                            f"{stat.S_IMODE(mode):o}); chmod 600 it")
        chain = _read(crt_path)
        key = _read(key_path)
    creds = grpc.ssl_channel_credentials(root_certificates=ca, private_key=key,
                                         certificate_chain=chain)
    if tok:
        creds = grpc.composite_channel_credentials(creds, grpc.access_token_call_credentials(tok))
    return creds, Resolved(d, bool(tok))
