"""The registry every family of named kinds uses: register, look up, list, refuse duplicates."""

from __future__ import annotations

from typing import Annotated, Literal

import pytest
from pydantic import Field

from des.config import Strict
from des.cost import COST_MODELS, CostConfig
from des.engine.router import ROUTERS, Routable
from des.engine.schedulers import SCHEDULERS, SchedulerConfig
from des.registry import Registry, UnknownKind, check_union, config_registrar, kind_of, union_members
from des.workload.arrivals import ARRIVALS, ArrivalConfig
from des.workload.lengths import LENGTHS, LengthConfig


class Alpha(Strict):
    kind: Literal["alpha"] = "alpha"


class Beta(Strict):
    kind: Literal["beta"] = "beta"


def test_register_get_and_list_in_registration_order():
    reg: Registry[type] = Registry("widget")
    add = config_registrar(reg)
    add(Beta)
    add(Alpha)
    assert reg.names() == ["beta", "alpha"]
    assert reg.get("alpha") is Alpha and "beta" in reg and len(reg) == 2


def test_a_duplicate_name_is_refused_and_the_first_kind_kept():
    reg: Registry[int] = Registry("widget")
    reg.register("x", 1)
    with pytest.raises(ValueError, match="widget 'x' is already registered"):
        reg.register("x", 2)
    assert reg.get("x") == 1


def test_an_unknown_name_lists_the_valid_ones():
    reg: Registry[int] = Registry("widget")
    reg.register("a", 1)
    reg.register("b", 2)
    with pytest.raises(UnknownKind) as err:
        reg.get("c")
    assert str(err.value) == "unknown widget 'c'; valid: a, b"


def test_kind_of_reads_the_discriminator_default():
    assert kind_of(Alpha) == "alpha"
    with pytest.raises(TypeError):
        kind_of(Strict)


def test_a_union_that_drifts_from_its_registry_is_caught():
    reg: Registry[type] = Registry("widget")
    config_registrar(reg)(Alpha)
    check_union(Annotated[Alpha, Field(discriminator="kind")], reg)
    config_registrar(reg)(Beta)
    with pytest.raises(TypeError, match="widget"):
        check_union(Annotated[Alpha, Field(discriminator="kind")], reg)


@pytest.mark.parametrize(
    ("union", "registry"),
    [(SchedulerConfig, SCHEDULERS), (CostConfig, COST_MODELS), (ArrivalConfig, ARRIVALS), (LengthConfig, LENGTHS)],
    ids=["schedulers", "cost models", "arrivals", "lengths"],
)
def test_every_scenario_union_holds_exactly_its_registered_kinds(union, registry):
    assert {kind_of(m) for m in union_members(union)} == set(registry)
    for name in registry:
        assert kind_of(registry.get(name)) == name


def test_router_factories_build_routers_that_pick_an_index():
    import numpy as np

    class Inst:
        def __init__(self, outstanding: int, free_blocks: int):
            self.outstanding = outstanding
            self.free_blocks = free_blocks
            self.running = 0  # what vllm_dp reads besides (engines report it as vLLM's do)

    pool: list[Routable] = [Inst(3, 5), Inst(1, 9), Inst(2, 1)]
    for name in ROUTERS:
        router = ROUTERS.get(name)(np.random.default_rng(0))
        assert 0 <= router.pick(pool) < len(pool)
