"""Plain-data helpers for nested scenario mappings: copy, merge, and dotted get/set.

Scenarios, study variants, catalog overrides and ``--set`` flags are all nested
mappings of YAML data; these are the few operations every layer needs on them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from des.errors import ScenarioError

#: Keys that name which kind of mapping a section is (scheduler, cost model, arrivals, lengths).
DISCRIMINATORS = ("kind", "process", "dist")


def deep_copy(data: Any) -> Any:
    """A copy of nested mappings and lists (leaves shared: they are immutable YAML scalars)."""
    if isinstance(data, Mapping):
        return {k: deep_copy(v) for k, v in data.items()}
    if isinstance(data, list):
        return [deep_copy(v) for v in data]
    return data


def merge(base: Any, over: Any) -> Any:
    """``over`` merged into ``base`` key by key; a mapping naming a different ``kind``,
    ``process`` or ``dist`` than the base replaces it whole (a static scheduler shares
    no keys with a continuous one)."""
    if not (isinstance(base, Mapping) and isinstance(over, Mapping)):
        return over
    for key in DISCRIMINATORS:
        if key in over and over[key] != base.get(key):
            return dict(over)
    out = dict(base)
    for k, v in over.items():
        out[k] = merge(out[k], v) if k in out else v
    return out


def _item(items: list[Any], key: str) -> int | None:
    """The index of ``key`` in a list of mappings: a number, or the ``name`` of an item (an
    item without one is named by its ``role``: ``main`` for ``both``, as a pool is)."""
    if key.isdigit():
        return int(key) if int(key) < len(items) else None
    for i, item in enumerate(items):
        if isinstance(item, Mapping):
            name = item.get("name") or {"both": "main", None: "main"}.get(item.get("role"), item.get("role"))
            if name == key:
                return i
    return None


def get_dotted(data: Mapping[str, Any], dotted: str) -> Any:
    """The value at ``a.b.c`` (an item of a list by its index or name: ``cluster.pools.decode``);
    KeyError if the path does not exist."""
    node: Any = data
    for key in dotted.split("."):
        if isinstance(node, list):
            i = _item(node, key)
            if i is None:
                raise KeyError(dotted)
            node = node[i]
            continue
        if not isinstance(node, Mapping) or key not in node:
            raise KeyError(dotted)
        node = node[key]
    return node


def set_dotted(data: dict, dotted: str, value: Any) -> None:
    """Set ``a.b.c`` in place, creating missing mappings; an item of a list is named by its
    index or its name (``cluster.pools.1.instances``, ``cluster.pools.decode.instances``). A
    catalog name under ``gpu`` (or the top level's ``model``) becomes ``{base: name}`` so
    single fields of the entry can be overridden."""
    keys = dotted.split(".")
    node: Any = data
    for i, key in enumerate(keys):
        last = i == len(keys) - 1
        if isinstance(node, list):
            index = _item(node, key)
            if index is None:
                names = [str(n) for n in range(len(node))]
                raise ScenarioError((".".join(keys[:i]), f"has no item {key!r} (items: {', '.join(names)}, or names)"))
            if last:
                node[index] = value
                return
            nxt = node[index]
        else:
            if last:
                node[key] = value
                return
            nxt = node.get(key)
            if nxt is None:
                nxt = node[key] = {}
            elif isinstance(nxt, str) and (key == "gpu" or (i == 0 and key == "model")):
                nxt = node[key] = {"base": nxt}
        if not isinstance(nxt, dict | list):
            raise ScenarioError((".".join(keys[: i + 1]), f"is {nxt!r}, not a mapping, so {dotted} cannot be set"))
        node = nxt
