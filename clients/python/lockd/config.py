"""lockctl's config file: contexts, like kubectl's kubeconfig.

lockd's development server writes one to ``./.lockd/lockctl.yaml`` with its
dev CA and a client SVID. The client reads the subset of YAML that file is
written in -- top-level ``key: value`` pairs and a ``contexts:`` list of
flat mappings of strings -- so it needs no YAML library; anything else is a
:class:`~lockd.errors.ConfigError` naming the line.

    current-context: dev
    contexts:
    - ca: /work/.lockd/pki/ca.crt
      cert: /work/.lockd/pki/dev.crt
      key: /work/.lockd/pki/dev.key
      name: dev
      server: 127.0.0.1:7420
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from typing import Dict, List, Optional, Tuple

from .errors import ConfigError

#: The fields of a context this client uses (the rest are lockctl's own).
_FIELDS = {"name", "server", "region", "ca", "cert", "key", "insecure-identity",
           "oidc-issuer", "oidc-client-id", "operator-token-file"}
_PATHS = ("ca", "cert", "key", "operator-token-file")


@dataclasses.dataclass
class Context:
    """One lockd endpoint and the credentials to reach it. Relative paths
    in the file are relative to the file."""

    name: str
    server: str = ""
    ca: str = ""
    cert: str = ""
    key: str = ""
    insecure_identity: str = ""


@dataclasses.dataclass
class Config:
    """A lockctl config file."""

    current_context: str
    contexts: List[Context]

    def context(self, name: Optional[str] = None) -> Context:
        """The named context, or the current one."""
        want = name or self.current_context
        for cx in self.contexts:
            if cx.name == want:
                if not cx.server:
                    raise ConfigError(f"context {want!r}: server: required")
                return cx
        raise ConfigError(f"no context {want!r} (current-context {self.current_context!r})")


_LINE = re.compile(r"^(?P<indent> *)(?P<dash>- +)?(?P<key>[A-Za-z][A-Za-z0-9_-]*):(?: +(?P<value>.*))?$")


def _scalar(raw: Optional[str], where: str) -> str:
    if raw is None:
        return ""
    raw = raw.strip()
    if raw.startswith('"'):
        try:
            value = json.loads(raw)
        except ValueError:
            raise ConfigError(f"{where}: a double-quoted string that does not end") from None
        if not isinstance(value, str):
            raise ConfigError(f"{where}: not a string")
        return value
    if raw.startswith("'"):
        if len(raw) < 2 or not raw.endswith("'"):
            raise ConfigError(f"{where}: a single-quoted string that does not end")
        return raw[1:-1].replace("''", "'")
    if raw[:1] in "[{&*!|>":
        raise ConfigError(f"{where}: this client reads plain strings only")
    return raw.split(" #", 1)[0].rstrip()


def parse(text: str, base: str = ".") -> Config:
    """Parse a config file's text; relative paths are joined to ``base``."""
    top: Dict[str, str] = {}
    contexts: List[Dict[str, str]] = []
    in_contexts = False
    item_indent: Optional[int] = None
    for n, line in enumerate(text.splitlines(), 1):
        where = f"line {n}"
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        m = _LINE.match(line.rstrip())
        if not m:
            raise ConfigError(f"{where}: not a 'key: value' line this client reads: {line.strip()!r}")
        indent, dash, key, value = len(m["indent"]), m["dash"], m["key"], m["value"]
        if indent == 0 and not dash:
            in_contexts = key == "contexts"
            if in_contexts:
                if value not in (None, "", "[]"):
                    raise ConfigError(f"{where}: contexts: want a list of contexts")
                continue
            top[key] = _scalar(value, where)
            continue
        if not in_contexts:
            raise ConfigError(f"{where}: {key}: indented under {key!r}, which holds no list")
        if dash:
            contexts.append({})
            item_indent = indent + len(dash)
        elif not contexts or indent != item_indent:
            raise ConfigError(f"{where}: {key}: not a field of a context")
        if key not in _FIELDS:
            raise ConfigError(f"{where}: unknown context field {key!r}")
        contexts[-1][key] = _scalar(value, where)
    out: List[Context] = []
    for raw in contexts:
        for p in _PATHS:
            if raw.get(p) and not os.path.isabs(raw[p]):
                raw[p] = os.path.join(base, raw[p])
        out.append(Context(name=raw.get("name", ""), server=raw.get("server", ""), ca=raw.get("ca", ""),
                           cert=raw.get("cert", ""), key=raw.get("key", ""),
                           insecure_identity=raw.get("insecure-identity", "")))
    return Config(current_context=top.get("current-context", ""), contexts=out)


def load(path: str) -> Config:
    """Read a config file."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise ConfigError(f"{path}: {e.strerror}") from None
    try:
        return parse(text, os.path.dirname(os.path.abspath(path)))
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None


__all__: Tuple[str, ...] = ("Config", "Context", "load", "parse")
