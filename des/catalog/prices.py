"""What serving costs: prices per GPU-hour and the energy a GPU draws.

A :class:`PriceBook` holds a price (US dollars per GPU-hour) and its source for every GPU
it knows: the catalog's on-demand list prices (``price`` in ``des/catalog/data/gpus.yaml``),
overridden by a price file (:func:`read_price_file`: a YAML mapping or a CSV with columns
``gpu,usd_per_gpu_hour``) and then by ``--price NAME=USD_PER_HOUR`` options
(:func:`parse_price_option`), the last word winning. Bad input raises
:class:`~des.errors.ScenarioError` naming the option and the problem in one line: an unknown
GPU (listing the known ones), a price that is not a number, negative or not finite.

Cost: ``Σ_gpu gpu_hours[gpu] × price[gpu]`` (:meth:`PriceBook.cost`), None when a GPU that
was paid for has no price. Energy (:func:`energy_kwh`): a GPU draws its spec sheet's board
power (``board_power_w``) for every hour it is paid for, busy or idle. That is an upper
bound on the board's draw (an idle GPU holding a CUDA context draws well below its TDP),
chosen because no measured idle power of these cards is in the catalog's sources; host CPU,
memory, network and cooling are not counted.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from des.catalog.specs import GPUSpec
from des.errors import ScenarioError, did_you_mean

#: Seconds per hour, for GPU-seconds to GPU-hours.
SECONDS_PER_HOUR = 3600.0

#: The option a price file is given with, named in its errors.
PRICE_FILE_OPTION = "--price-file"
#: The option a single price is given with, named in its errors.
PRICE_OPTION = "--price"


def _catalog_prices() -> dict[str, tuple[float | None, str]]:
    """Every catalog GPU's (price, source); (None, why) for a GPU with no price."""
    from des import catalog

    out: dict[str, tuple[float | None, str]] = {}
    for name in catalog.gpu_names():
        spec = catalog.gpu(name)
        out[name] = _spec_price(spec)
    return out


def _spec_price(spec: GPUSpec) -> tuple[float | None, str]:
    if spec.price is None:
        return None, f"no price in the catalog for {spec.name}"
    return spec.price.usd_per_gpu_hour, f"{spec.price.source} ({spec.price.date})"


def _known(names: Iterable[str]) -> str:
    return ", ".join(sorted(names))


def parse_price(text: Any, option: str, gpu: str) -> float:
    """A price in USD per GPU-hour from ``text`` (a number or a string holding one);
    ScenarioError naming ``option`` and ``gpu`` when it is not a finite number ≥ 0."""
    if isinstance(text, bool) or not isinstance(text, int | float | str):
        raise ScenarioError((option, f"{gpu}: the price must be a number of USD per GPU-hour (got {text!r})"))
    try:
        value = float(text)
    except ValueError:
        raise ScenarioError((option, f"{gpu}: the price must be a number of USD per GPU-hour (got {text!r})")) from None
    if not math.isfinite(value):
        raise ScenarioError((option, f"{gpu}: the price must be finite (got {text!r})"))
    if value < 0:
        raise ScenarioError((option, f"{gpu}: the price must be >= 0 USD per GPU-hour (got {text!r})"))
    return value


def _check_name(name: str, known: Iterable[str], option: str) -> str:
    known = list(known)
    if name not in known:
        hint = did_you_mean(name, known)
        raise ScenarioError((option, f"unknown GPU {name!r}{hint}; known: {_known(known)}"))
    return name


def parse_price_option(text: str, known: Iterable[str] | None = None, option: str = PRICE_OPTION) -> tuple[str, float]:
    """``NAME=USD_PER_HOUR`` (``--price rtx4090=0.5``) as (name, price). ``known``: the GPU
    names a price may be given for (default: the catalog's)."""
    from des import catalog

    known = catalog.gpu_names() if known is None else list(known)
    if not isinstance(text, str) or "=" not in text:
        raise ScenarioError((option, f"expected NAME=USD_PER_HOUR, e.g. rtx4090=0.69 (got {text!r})"))
    name, _, value = text.partition("=")
    name = _check_name(name.strip(), known, option)
    return name, parse_price(value.strip(), option, name)


def read_price_file(
    path: str | Path, known: Iterable[str] | None = None, option: str = PRICE_FILE_OPTION
) -> dict[str, float]:
    """Prices from a file: ``.csv`` with a header ``gpu,usd_per_gpu_hour`` (other columns
    ignored), anything else as YAML, a mapping ``NAME: USD_PER_HOUR`` (or ``NAME:
    {usd_per_gpu_hour: X, ...}``). A GPU named twice is an error."""
    from des import catalog
    from des.config import load_yaml

    known = catalog.gpu_names() if known is None else list(known)
    where = f"{option} {path}"
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ScenarioError((option, f"cannot read {path}: {exc.strerror or exc}")) from None
    except UnicodeDecodeError as exc:
        raise ScenarioError((option, f"{path} is not a text file (byte {exc.start} is not UTF-8)")) from None
    pairs: list[tuple[str, Any]] = []
    if str(path).lower().endswith(".csv"):
        rows = csv.DictReader(text.splitlines())
        missing = {"gpu", "usd_per_gpu_hour"} - set(rows.fieldnames or [])
        if missing:
            raise ScenarioError(
                (where, f"a CSV price file needs the columns gpu,usd_per_gpu_hour (missing: {_known(missing)})")
            )
        pairs = [((row["gpu"] or "").strip(), row["usd_per_gpu_hour"]) for row in rows]
    else:
        try:
            data = load_yaml(text)
        except Exception as exc:  # noqa: BLE001 (any YAML error is one line here)
            raise ScenarioError((where, f"not valid YAML: {str(exc).splitlines()[0]}")) from None
        if not isinstance(data, dict):
            raise ScenarioError((where, "expected a mapping of GPU name to USD per GPU-hour, e.g. rtx4090: 0.69"))
        for name, value in data.items():
            if isinstance(value, dict):
                if "usd_per_gpu_hour" not in value:
                    raise ScenarioError((where, f"{name}: needs usd_per_gpu_hour"))
                value = value["usd_per_gpu_hour"]
            pairs.append((str(name), value))
    prices: dict[str, float] = {}
    for name, value in pairs:
        _check_name(name, known, where)
        if name in prices:
            raise ScenarioError((where, f"{name}: priced twice"))
        prices[name] = parse_price(value, where, name)
    return prices


@dataclass(frozen=True)
class PriceBook:
    """Prices (USD per GPU-hour) and where each comes from, by GPU name.

    ``catalog``: the catalog's (price or None, source) per GPU; ``overrides``: prices given
    by a file or options, (price, source) per GPU, which win over the catalog's and over a
    GPU spec's own. ``PriceBook.build(["rtx4090=0.5"], "prices.csv")`` is the catalog's,
    overridden by the file's and then by the options'.
    """

    catalog: Mapping[str, tuple[float | None, str]]
    overrides: Mapping[str, tuple[float, str]] = field(default_factory=dict)

    @classmethod
    def from_catalog(cls) -> PriceBook:
        """The catalog's list prices, nothing overridden."""
        return cls(_catalog_prices())

    @classmethod
    def build(
        cls, price_options: Iterable[str] = (), price_file: str | Path | None = None, extra_names: Iterable[str] = ()
    ) -> PriceBook:
        """The catalog's prices, overridden by ``price_file`` and then by ``price_options``
        (``NAME=USD_PER_HOUR`` strings, a later one winning over an earlier one).
        ``extra_names``: names of GPUs outside the catalog (a scenario's inline GPUs) that
        may be priced too."""
        book = cls.from_catalog()
        known = [*book.catalog, *extra_names]
        if price_file is not None:
            book = book.overridden(read_price_file(price_file, known), f"price file {price_file}")
        for text in price_options:
            name, price = parse_price_option(text, known)
            book = book.overridden({name: price}, f"{PRICE_OPTION} {text}")
        return book

    def overridden(self, prices: Mapping[str, float], source: str) -> PriceBook:
        """This book with ``prices`` overriding, each sourced to ``source``."""
        return PriceBook(self.catalog, {**self.overrides, **{k: (v, source) for k, v in prices.items()}})

    def _entry(self, gpu: str | GPUSpec) -> tuple[float | None, str]:
        name = gpu if isinstance(gpu, str) else gpu.name
        if name in self.overrides:
            return self.overrides[name]
        if isinstance(gpu, GPUSpec):
            return _spec_price(gpu)
        if name not in self.catalog:
            hint = did_you_mean(name, self.catalog)
            raise ScenarioError(("gpu", f"no price for unknown GPU {name!r}{hint}; known: {_known(self.catalog)}"))
        return self.catalog[name]

    def per_gpu_hour(self, gpu: str | GPUSpec) -> float | None:
        """USD per GPU-hour of ``gpu``: an override's, else a spec's own ``price`` (an
        inline GPU, or a catalog one a scenario re-priced), else the catalog's; None when
        it has none. An unknown name raises ScenarioError listing the known ones."""
        return self._entry(gpu)[0]

    def source(self, gpu: str | GPUSpec) -> str:
        """Where :meth:`per_gpu_hour`'s figure comes from (provider, instance and month, or
        the option or file that set it)."""
        return self._entry(gpu)[1]

    def cost(self, gpu_hours_by_gpu: Mapping[str, float]) -> float | None:
        """USD for ``gpu_hours_by_gpu`` (GPU name → GPU-hours paid for):
        ``Σ hours × price``; None when a GPU with hours > 0 has no price."""
        total = 0.0
        for name, hours in gpu_hours_by_gpu.items():
            if not math.isfinite(hours) or hours < 0:
                raise ValueError(f"gpu_hours[{name!r}] must be a finite number >= 0 (got {hours!r})")
            price = self.per_gpu_hour(name)
            if hours == 0:
                continue
            if price is None:
                return None
            total += hours * price
        return total


def gpu_hours(gpu_seconds: float) -> float:
    """GPU-seconds as GPU-hours."""
    return gpu_seconds / SECONDS_PER_HOUR


def energy_kwh(gpu_hours: float, board_power_w: float) -> float:
    """kWh a GPU draws over ``gpu_hours`` paid for, at its board power (W) throughout:
    ``gpu_hours × board_power_w / 1000``, an upper bound (module docstring)."""
    if gpu_hours < 0 or board_power_w < 0:
        raise ValueError(f"gpu_hours and board_power_w must be >= 0 (got {gpu_hours!r}, {board_power_w!r})")
    return gpu_hours * board_power_w / 1000.0
