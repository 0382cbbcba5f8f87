"""Catalog prices and board power, the PriceBook's overrides (options, YAML and CSV files),
its one-line errors, and the cost and energy sums."""

from __future__ import annotations

import re

import pytest

from des import catalog
from des.catalog.prices import PriceBook, energy_kwh, gpu_hours, parse_price_option, read_price_file
from des.catalog.specs import GPUSpec
from des.errors import ScenarioError

GPUS = catalog.gpu_names()
#: GPUs the catalog has no price for, each documented in gpus.yaml.
UNPRICED = {"h20", "rtx-pro-6000-server"}


def catalog_price(name: str) -> float:
    price = catalog.gpu(name).price
    assert price is not None
    return price.usd_per_gpu_hour


def one_line(exc: ScenarioError, option: str) -> str:
    lines = exc.lines()
    assert len(lines) == 1 and "\n" not in lines[0], lines
    assert lines[0].startswith(f"error: {option}"), lines[0]
    return lines[0]


def test_the_catalog_lists_the_fourteen_gpus_priced_here():
    assert set(GPUS) == {
        "rtx4090", "l40s", "a100-80gb", "a100-40gb", "a40", "h100-80gb", "h200", "h20", "b200",
        "rtx-pro-6000", "rtx-pro-6000-server", "rtx5090", "l4", "mi300x",
    }  # fmt: skip


@pytest.mark.parametrize("name", GPUS)
def test_every_gpu_has_board_power_with_its_source(name):
    g = catalog.gpu(name)
    assert g.board_power_w is not None and 50 <= g.board_power_w <= 1200
    assert f"{g.board_power_w:.0f} W" in g.power_source.replace(",", "")


@pytest.mark.parametrize("name", GPUS)
def test_every_price_has_a_source_and_a_month(name):
    g = catalog.gpu(name)
    if name in UNPRICED:
        assert g.price is None
        return
    assert g.price is not None
    assert 0.1 <= g.price.usd_per_gpu_hour <= 20
    assert re.fullmatch(r"20[0-9]{2}-(0[1-9]|1[0-2])", g.price.date)
    assert any(p in g.price.source for p in ("RunPod", "Lambda", "AWS", "Google", "Azure", "Vast"))
    assert "list price" in g.price.source


def test_a_price_needs_a_source_and_a_month():
    base = catalog.resolve("gpus", "rtx4090")
    for price, field in (
        ({"usd_per_gpu_hour": 1.0, "date": "2025-06"}, "source"),
        ({"usd_per_gpu_hour": 1.0, "source": "x", "date": "June 2025"}, "date"),
        ({"usd_per_gpu_hour": -1.0, "source": "x", "date": "2025-06"}, "usd_per_gpu_hour"),
    ):
        with pytest.raises(ValueError, match=field):
            GPUSpec.model_validate({**base, "price": price})


def test_the_book_reads_the_catalog():
    book = PriceBook.from_catalog()
    for name in GPUS:
        g = catalog.gpu(name)
        assert book.per_gpu_hour(name) == (None if g.price is None else g.price.usd_per_gpu_hour)
    assert book.source("rtx4090").startswith("RunPod")
    assert book.per_gpu_hour("h20") is None and "no price" in book.source("h20")


def test_an_option_overrides_the_catalog_and_the_last_one_wins():
    book = PriceBook.build(["rtx4090=0.5", "l4=0", "rtx4090=0.25"])
    assert book.per_gpu_hour("rtx4090") == 0.25
    assert book.source("rtx4090") == "--price rtx4090=0.25"
    assert book.per_gpu_hour("l4") == 0.0
    assert book.per_gpu_hour("h100-80gb") == catalog_price("h100-80gb")
    assert PriceBook.build(["h20=1.5"]).per_gpu_hour("h20") == 1.5


def test_a_yaml_file_overrides_and_options_override_the_file(tmp_path):
    path = tmp_path / "prices.yaml"
    path.write_text("rtx4090: 0.44\nh100-80gb: {usd_per_gpu_hour: 6.88, source: AWS p5.48xlarge / 8}\n")
    assert read_price_file(path) == {"rtx4090": 0.44, "h100-80gb": 6.88}
    book = PriceBook.build(["rtx4090=0.3"], path)
    assert book.per_gpu_hour("rtx4090") == 0.3
    assert book.per_gpu_hour("h100-80gb") == 6.88
    assert book.source("h100-80gb") == f"price file {path}"


def test_a_csv_file_overrides(tmp_path):
    path = tmp_path / "prices.csv"
    path.write_text("gpu,usd_per_gpu_hour,note\nrtx4090,0.34,community\nl40s, 0.79 ,\n")
    book = PriceBook.build(price_file=path)
    assert book.per_gpu_hour("rtx4090") == 0.34 and book.per_gpu_hour("l40s") == 0.79
    assert book.per_gpu_hour("a40") == catalog_price("a40")


@pytest.mark.parametrize(
    ("text", "expect"),
    [
        ("rtx409=1", "unknown GPU 'rtx409' (did you mean 'rtx4090'?); known: a100-40gb, "),
        (
            "h100=2",
            "known: a100-40gb, a100-80gb, a40, b200, h100-80gb, h20, h200, l4, l40s, mi300x, rtx-pro-6000, "
            "rtx-pro-6000-server",
        ),
        ("rtx4090=-0.1", "rtx4090: the price must be >= 0"),
        ("rtx4090=cheap", "rtx4090: the price must be a number"),
        ("rtx4090=inf", "rtx4090: the price must be finite"),
        ("rtx4090", "expected NAME=USD_PER_HOUR"),
    ],
)
def test_a_bad_option_is_one_line_naming_it(text, expect):
    with pytest.raises(ScenarioError) as err:
        parse_price_option(text)
    assert expect in one_line(err.value, "--price: ")


@pytest.mark.parametrize(
    ("name", "content", "expect"),
    [
        ("p.yaml", "rtx4090: -1\n", "rtx4090: the price must be >= 0"),
        ("p.yaml", "rtx4090: cheap\n", "rtx4090: the price must be a number"),
        ("p.yaml", "rtx4090: true\n", "rtx4090: the price must be a number"),
        ("p.yaml", "gtx1080: 0.1\n", "unknown GPU 'gtx1080'"),
        ("p.yaml", "- rtx4090\n", "expected a mapping of GPU name"),
        ("p.yaml", "rtx4090: {source: x}\n", "rtx4090: needs usd_per_gpu_hour"),
        ("p.yaml", "rtx4090: [1\n", "not valid YAML"),
        ("p.csv", "name,price\nrtx4090,1\n", "needs the columns gpu,usd_per_gpu_hour"),
        ("p.csv", "gpu,usd_per_gpu_hour\nrtx4090,\n", "rtx4090: the price must be a number"),
        ("p.csv", "gpu,usd_per_gpu_hour\nrtx4090,1\nrtx4090,2\n", "rtx4090: priced twice"),
        ("p.csv", "gpu,usd_per_gpu_hour\nrtx4090,-3\n", "rtx4090: the price must be >= 0"),
    ],
)
def test_a_bad_price_file_is_one_line_naming_the_option_and_file(tmp_path, name, content, expect):
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(ScenarioError) as err:
        PriceBook.build(price_file=path)
    line = one_line(err.value, f"--price-file {path}: ")
    assert expect in line


def test_a_missing_price_file_is_one_line(tmp_path):
    with pytest.raises(ScenarioError) as err:
        read_price_file(tmp_path / "nope.yaml")
    assert "cannot read" in one_line(err.value, "--price-file: ")


def test_cost_is_the_sum_of_gpu_hours_times_price_exactly():
    book = PriceBook.build(["rtx4090=0.69", "h100-80gb=2.99", "l4=0.43"])
    hours = {"rtx4090": 36.5, "h100-80gb": 7.25, "l4": 0.0}
    assert book.cost(hours) == 36.5 * 0.69 + 7.25 * 2.99
    assert book.cost({}) == 0.0


def test_cost_is_unknown_when_a_paid_gpu_has_no_price():
    book = PriceBook.from_catalog()
    assert book.cost({"rtx4090": 1.0, "h20": 2.0}) is None
    assert book.cost({"rtx4090": 1.0, "h20": 0.0}) == book.per_gpu_hour("rtx4090")
    with pytest.raises(ScenarioError, match="unknown GPU 'tpu'"):
        book.cost({"tpu": 1.0})
    with pytest.raises(ValueError, match="must be a finite number >= 0"):
        book.cost({"rtx4090": -1.0})


def test_an_inline_gpu_uses_its_own_price_unless_overridden():
    fields = {**catalog.resolve("gpus", "rtx4090"), "name": "my-4090"}
    priced = GPUSpec.model_validate({**fields, "price": {"usd_per_gpu_hour": 0.2, "source": "own", "date": "2026-11"}})
    bare = GPUSpec.model_validate({**fields, "price": None})
    book = PriceBook.from_catalog()
    assert book.per_gpu_hour(priced) == 0.2 and book.source(priced) == "own (2026-11)"
    assert book.per_gpu_hour(bare) is None
    over = PriceBook.build(["my-4090=0.1"], extra_names=["my-4090"])
    assert over.per_gpu_hour(priced) == 0.1 and over.per_gpu_hour("my-4090") == 0.1
    with pytest.raises(ScenarioError, match="unknown GPU 'my-4090'"):
        PriceBook.build(["my-4090=0.1"])


def test_energy_is_board_power_over_the_hours_paid():
    assert gpu_hours(7200.0) == 2.0
    power = catalog.gpu("h100-80gb").board_power_w
    assert power == 700
    assert energy_kwh(gpu_hours(5400.0), power) == 1.5 * 700 / 1000
    assert energy_kwh(0.0, 450) == 0.0
    with pytest.raises(ValueError):
        energy_kwh(-1.0, 450)


def test_the_readme_table_matches_the_catalog():
    from tests.helpers import ROOT

    rows = re.findall(
        r"^\| `([a-z0-9.-]+)` \| ([0-9.]+|none) \| [^|]+ \| ([0-9]+) W \|$", (ROOT / "README.md").read_text(), re.M
    )
    assert {r[0] for r in rows} == set(GPUS)
    for name, price, watts in rows:
        g = catalog.gpu(name)
        assert float(watts) == g.board_power_w
        assert (None if price == "none" else float(price)) == (g.price and g.price.usd_per_gpu_hour)
