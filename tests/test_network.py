"""Tensor-parallel communication: the interconnect per GPU, its fit to NCCL profiles, and
the all-reduce term of the roofline.

The NCCL all-reduce fit to Vidur's profiles (data/vidur-kernel-profiles/network/) must
reproduce them within the stated errors; refitting must give the catalog's numbers (4
significant digits) for the fitted GPUs and, through the stated rules, for the
transferred ones; the roofline must charge what vLLM runs at each message size; the old
two-number shorthand must still mean the old formula; and ``des calibrate --network``
and ``des costmodel`` must print the fit's errors and the share of a step spent
communicating.
"""

from __future__ import annotations

import math

import pytest

import des
from des import catalog
from des.catalog.interconnect import InterconnectSpec, log_sd, ring_factor
from des.cost.roofline import build_roofline, graph_size
from des.tools.costmodel import CostReport, decode_shape, prefill_shape
from des.tools.network import CATALOG, CUSTOM_SD, PCIE, NetworkFit, fit_networks
from tests.helpers import ROOT, des_cli

NETWORK = ROOT / "data" / "vidur-kernel-profiles" / "network"
MiB = 1 << 20

#: Errors the fit is held to per profile (fractions): the largest median |err| over its TP
#: degrees and the largest sd of the log residuals. The profiles are eager-mode kernel
#: times with outliers at small sizes (max |err| up to 5x), hence the sd, not the max.
STATED = {
    "a100_dgx": (0.11, 0.20),
    "a100_pairwise_nvlink": (0.03, 0.13),
    "h100_dgx": (0.07, 0.22),
    "h100_pairwise_nvlink": (0.05, 0.17),
}


@pytest.fixture(scope="module")
def fits() -> dict[str, NetworkFit]:
    return {f.name: f for f in fit_networks(NETWORK)}


def test_every_profile_is_fitted_per_tp_degree_within_the_stated_errors(fits):
    assert sorted(fits) == sorted(STATED)
    for name, fit in fits.items():
        median, sd = STATED[name]
        assert len(fit.degrees) >= 2, name
        for tp, d in fit.degrees.items():
            assert d.points >= 900, (name, tp)
            assert d.median_abs_error < median, (name, tp, d.median_abs_error)
            assert d.log_sd < sd, (name, tp, d.log_sd)


def test_sizes_are_bytes_so_the_fitted_bus_bandwidth_stays_below_the_link(fits):
    """Vidur records ``size`` in bytes (``self._size * 2`` of an fp16 buffer): read as
    elements, every NVLink fit would reach more than the link carries (H100 4 GPUs: 777
    of 450 GB/s); read as bytes each reaches between 30 % and 100 % of it."""
    for gpu, name in CATALOG.items():
        link = catalog.gpu(gpu).link.link_bandwidth
        assert link is not None
        for tp, d in fits[name].degrees.items():
            assert 0.3 < d.cost.bus_bandwidth / link < 1.0, (gpu, tp)
            assert 1e-6 < d.cost.latency < 1e-4, (gpu, tp)


def test_refitting_the_profiles_reproduces_the_catalogs_fitted_links(fits):
    for gpu, name in CATALOG.items():
        link = catalog.gpu(gpu).link
        assert link.provenance == "fitted" and name in link.basis
        assert link.nccl == fits[name].nccl()  # both to 4 significant digits
        assert link.uncertainty == fits[name].uncertainty
        assert link.uncertainty == pytest.approx(log_sd(fits[name].pooled_log_sd, CUSTOM_SD), abs=0.006)


def _scaled(link: InterconnectSpec, by) -> list[float]:
    return [x for tp, c in sorted(link.nccl.items()) for x in (tp, c.latency, by(tp) * c.bus_bandwidth)]


def _as_list(link: InterconnectSpec) -> list[float]:
    return _scaled(link, lambda tp: 1.0)


def test_transferred_links_follow_their_stated_rules(fits):
    h100 = catalog.gpu("h100-80gb").link
    for gpu in ("h200", "h20"):  # same NVLink 4 fabric: the H100's fit as it is
        assert catalog.gpu(gpu).link.nccl == h100.nccl
    b200 = catalog.gpu("b200").link  # the H100's share of its link, on NVLink 5
    assert _as_list(b200) == pytest.approx(_scaled(h100, lambda tp: 900e9 / 450e9), rel=1e-3)
    mi300x = catalog.gpu("mi300x").link  # the same share of the n - 1 links of 64 GB/s a group uses
    assert _as_list(mi300x) == pytest.approx(_scaled(h100, lambda tp: (tp - 1) * 64e9 / 450e9), rel=1e-3)
    for gpus, (profile, tp) in (({"l40s", "l4"}, PCIE["pcie4"]),):
        pcie = fits[profile].nccl()[tp]
        for gpu in gpus:  # PCIe peer-to-peer: the NCCL cost of a ring crossing the same PCIe generation
            link = catalog.gpu(gpu).link
            assert link.kind == "pcie_p2p" and link.nccl == {2: pcie}, gpu
    for gpu, p2p in (("rtx4090", "l40s"), ("rtx5090", "rtx-pro-6000")):  # through host memory: half of it
        host, peer = catalog.gpu(gpu).link, catalog.gpu(p2p).link
        assert host.kind == "pcie_host" and not host.custom_max_bytes
        assert host.nccl[2].latency == peer.nccl[2].latency
        assert host.nccl[2].bus_bandwidth == pytest.approx(peer.nccl[2].bus_bandwidth / 2, rel=1e-3)


def test_uncertainty_widens_from_fitted_to_transferred_to_derived():
    u = {name: catalog.gpu(name).link.uncertainty for name in catalog.gpu_names()}
    fitted = max(u["a100-80gb"], u["h100-80gb"])
    assert fitted < u["h200"] == u["h20"] < u["b200"] < u["mi300x"] < u["rtx4090"]
    assert fitted < u["l40s"] == u["l4"] < u["rtx4090"]
    for name in catalog.gpu_names():
        link = catalog.gpu(name).link
        assert link.provenance in ("fitted", "transferred") and link.basis and link.source, name


@pytest.mark.parametrize(
    ("gpu", "tp", "nbytes", "runs"),
    [
        ("a100-80gb", 2, 8 * MiB - 16, "vllm"),  # custom all-reduce: below max_size 8192 * 1024
        ("a100-80gb", 2, 8 * MiB, "nccl"),
        ("h100-80gb", 8, 32 * MiB, "vllm"),  # sm_90: symmetric memory up to 64 MiB at 8 GPUs
        ("h100-80gb", 4, 40 * MiB, "nccl"),  # ... 32 MiB at 4
        ("b200", 2, 16 * MiB, "nccl"),  # sm_100: 8 MiB at 2 GPUs
        ("l40s", 2, 1 * MiB, "vllm"),  # PCIe peer-to-peer: vLLM's own at 2 GPUs only
        ("l40s", 4, 1 * MiB, "nccl"),
        ("rtx4090", 2, 16 * 1024, "nccl"),  # GeForce: no P2P, so NCCL through host memory
        ("rtx4090", 1, 16 * 1024, "none"),
    ],
)
def test_vllm_runs_its_own_all_reduce_only_where_and_below_what_its_code_allows(gpu, tp, nbytes, runs):
    link = catalog.gpu(gpu).link
    assert link.algorithm(nbytes, tp) == runs
    cost = link.nccl_cost(tp) if tp > 1 else None
    if runs == "vllm":
        assert cost is not None and link.custom_latency is not None
        assert link.seconds(nbytes, tp) == link.custom_latency + ring_factor(tp) * nbytes / cost.bus_bandwidth
        assert link.seconds(nbytes, tp) < cost.seconds(nbytes, tp)
    elif runs == "nccl":
        assert cost is not None and link.seconds(nbytes, tp) == cost.seconds(nbytes, tp)
    else:
        assert link.seconds(nbytes, tp) == 0.0


def test_a_tp_degree_without_its_own_fit_takes_the_nearest_below():
    link = catalog.gpu("h100-80gb").link
    assert link.nccl_cost(6) == link.nccl[4] and link.nccl_cost(16) == link.nccl[8]
    assert catalog.gpu("l40s").link.nccl_cost(8) == catalog.gpu("l40s").link.nccl[2]


@pytest.mark.parametrize("gpu", ["a100-80gb", "h100-80gb", "rtx4090", "l40s", "mi300x"])
@pytest.mark.parametrize("tp", [2, 4, 8])
def test_the_roofline_charges_two_all_reduces_per_layer_and_the_embeddings_of_what_vllm_runs(gpu, tp):
    g, m = catalog.gpu(gpu), catalog.model("llama-3.1-8b")
    r = build_roofline(g, m, tp=tp)
    h, L = m.hidden_size, m.num_layers
    split = g.link.custom_limit(tp) / (2 * h)
    tokens = {1, 8, 256, 512, 513, 4096, 16384}
    if split:
        tokens |= {int(split) - 1, int(split), int(split) + 1}
    for t in sorted(tokens):
        assert r.allreduce(t) == pytest.approx((2 * L + 1) * g.link.seconds(t * h * 2, tp), rel=1e-12), t
    for shape in (decode_shape(1, 100), decode_shape(48, 900), prefill_shape(700), prefill_shape(5000)):
        b = r.breakdown(shape)
        t = shape.prefill_tokens + shape.decode_tokens
        assert b["allreduce"] == r.allreduce(graph_size(t) if t <= r.graph_max else t)
        assert r.step_time(shape) == pytest.approx(max(b["gpu"], b["cpu"]), rel=1e-12)


def test_one_gpu_has_no_communication_and_the_4090_at_tp1_is_unchanged():
    for name in catalog.gpu_names():
        r = build_roofline(catalog.gpu(name), catalog.model("qwen2.5-7b"), tp=1)
        assert r.allreduce(512) == 0.0 and r.breakdown(prefill_shape(512))["allreduce"] == 0.0


def test_the_old_shorthand_means_nccl_at_that_cost_for_every_tp_degree():
    base = catalog.resolve("gpus", "h100-80gb")
    g = des.load_scenario(
        None, [("gpu", {"base": "h100-80gb", "interconnect_bandwidth": 1.0e11, "interconnect_latency": 1e-5})]
    ).gpu
    m = catalog.model("llama-3.1-8b")
    for tp in (2, 4, 8):
        r = build_roofline(g, m, tp=tp)
        for t in (1, 64, 4096):  # no step where vLLM's own all-reduce would have run
            expected = (2 * m.num_layers + 1) * (1e-5 + ring_factor(tp) * t * m.hidden_size * 2 / 1.0e11)
            assert r.allreduce(t) == pytest.approx(expected, rel=1e-12)
    assert g.link.provenance == "spec" and not g.link.custom_max_bytes
    # one of the two given: the other from the catalog link's NCCL cost at its smallest TP degree
    half = des.load_scenario(None, [("gpu", {"base": "h100-80gb", "interconnect_bandwidth": 1.0e11})]).gpu.link
    assert half.nccl[2].latency == base["interconnect"]["nccl"][2]["latency"]
    # an inline GPU without either keeps the old defaults (25 GB/s, 20 us)
    inline = {k: v for k, v in base.items() if k != "interconnect"}
    link = des.load_scenario(None, [("gpu", inline)]).gpu.link
    assert (link.nccl[2].bus_bandwidth, link.nccl[2].latency) == (25.0e9, 20e-6)


@pytest.mark.parametrize(
    ("gpu", "path", "words"),
    [
        ({"interconnect_bandwidth": -1}, "gpu.interconnect_bandwidth", "> 0"),
        ({"interconnect_latency": "fast"}, "gpu.interconnect_latency", "number"),
        ({"interconnect": {"kind": "pcie", "nccl": {2: {"latency": 0, "bus_bandwidth": 1e9}}}}, "gpu.interconnect.kind",
         "pcie_host"),
        ({"interconnect": {"kind": "nvlink", "nccl": {}}}, "gpu.interconnect", "nccl"),
        ({"interconnect": {"kind": "pcie_host", "nccl": {2: {"latency": 0, "bus_bandwidth": 1e9}},
                           "custom_latency": 1e-5, "custom_max_bytes": {2: 1024}}}, "gpu.interconnect", "peer-to-peer"),
        ({"interconnect": {"kind": "pcie_p2p", "nccl": {2: {"latency": 0, "bus_bandwidth": 1e9}},
                           "custom_latency": 1e-5, "custom_max_bytes": {4: 1024}}}, "gpu.interconnect", "TP 2"),
        ({"interconnect": {"kind": "nvlink", "nccl": {2: {"latency": 0, "bus_bandwidth": 1e9}},
                           "custom_max_bytes": {2: 1024}}}, "gpu.interconnect", "custom_latency"),
    ],
)  # fmt: skip
def test_a_bad_interconnect_is_one_line_naming_the_field(gpu, path, words):
    inline = {k: v for k, v in catalog.resolve("gpus", "h100-80gb").items() if k != "interconnect"}
    with pytest.raises(des.ScenarioError) as err:
        des.load_scenario(None, [("gpu", {**inline, **gpu})])
    assert len(err.value.problems) == 1
    where, problem = err.value.problems[0]
    assert where.startswith(path) and words in f"{where}: {problem}", (where, problem)


def test_a_bad_interconnect_exits_2_with_one_line(tmp_path):
    res = des_cli("run", "scenarios/qwen7b-4090-poisson.yaml", "--out", str(tmp_path / "r"),
                  "--set", "gpu.interconnect_bandwidth=-5")  # fmt: skip
    assert res.returncode == 2 and "Traceback" not in res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: gpu.interconnect_bandwidth:") and "-5" in lines[0]


def test_calibrate_network_prints_the_fit_and_its_errors_per_tp_degree(fits):
    res = des_cli("calibrate", "--network", str(NETWORK))
    assert res.returncode == 0, res.stderr
    out = res.stdout
    for name, fit in fits.items():
        for tp, d in fit.degrees.items():
            row = next(line for line in out.splitlines() if f" {name} " in line and f"│  {tp} │" in line)
            assert f"{d.cost.latency * 1e6:.1f} us" in row and f"{d.cost.bus_bandwidth / 1e9:.1f} GB/s" in row
            assert f"{100 * d.median_abs_error:.1f} %" in row and f"{d.log_sd:.3f}" in row
    for gpu in CATALOG:
        assert f"{gpu}: carries" in out


def test_calibrate_network_finds_the_profiles_under_vidurs_root_and_one_system(fits):
    one = fit_networks(NETWORK / "h100_dgx")
    assert [f.name for f in one] == ["h100_dgx"] and one[0].nccl() == fits["h100_dgx"].nccl()
    assert [f.name for f in fit_networks(NETWORK.parent)] == sorted(fits)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("a,b\n1,2\n", "needs the columns"),
        (",time_stats.all_reduce.median,num_workers,size,devices_per_node\n0,-1,2,2048,2\n", "row 1"),
        (",time_stats.all_reduce.median,num_workers,size,devices_per_node\n0,0.1,2,2048,1\n", "one node"),
        (",time_stats.all_reduce.median,num_workers,size,devices_per_node\n0,0.1,2,2048,2\n", "at least 8 rows"),
    ],
)
def test_a_bad_network_profile_exits_2_with_one_line(tmp_path, text, words):
    (tmp_path / "all_reduce.csv").write_text(text)
    res = des_cli("calibrate", "--network", str(tmp_path))
    assert res.returncode == 2 and "Traceback" not in res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --network:") and words in lines[0], lines


def test_costmodel_shows_the_share_of_a_step_spent_communicating_per_tp_degree():
    rep = CostReport.build(catalog.gpu("h100-80gb"), catalog.model("llama-3.1-8b"))
    rows = rep.comm_table()
    assert [r["tp"] for r in rows] == [1, 2, 4, 8]
    assert rows[0]["decode_share"] == rows[0]["prefill_share"] == 0.0 and rows[0]["decode_runs"] == "none"
    for kind in ("decode", "prefill"):
        shares = [r[f"{kind}_share"] for r in rows]
        assert shares == sorted(shares) and 0 < shares[-1] < 1, kind
        for r in rows[1:]:
            r2 = build_roofline(rep.gpu, rep.model, tp=r["tp"])
            shape = decode_shape(32, 2048) if kind == "decode" else prefill_shape(2048)
            assert r[f"{kind}_comm_ms"] == pytest.approx(1e3 * r2.breakdown(shape)["allreduce"], rel=1e-12)
            assert r[f"{kind}_share"] == pytest.approx(r2.breakdown(shape)["allreduce"] / r2.step_time(shape))
    res = des_cli("costmodel", "--gpu", "h100-80gb", "--model", "llama-3.1-8b")
    assert res.returncode == 0, res.stderr
    assert "all-reduces per TP degree" in res.stdout and "link     nvlink, all-reduce cost fitted" in res.stdout
    for r in rows:
        line = next(x for x in res.stdout.splitlines() if x.startswith(f"│  {r['tp']} │"))
        assert f"{100 * r['decode_share']:.1f} %" in line and f"{100 * r['prefill_share']:.1f} %" in line
        assert r["decode_runs"] in line
    host = des_cli("costmodel", "--gpu", "rtx4090", "--model", "qwen2.5-7b")
    assert host.returncode == 0 and "pcie_host" in host.stdout and "nccl" in host.stdout


# -- two RTX PRO 6000 over PCIe 5.0: NCCL measured, and the TP 2 step against the kernel profile --

PRO6000 = ROOT / "data" / "rtxpro6000-vllm-kernel-profile"


@pytest.fixture(scope="module")
def pcie5():
    from des.tools.network import fit_collectives

    return fit_collectives(PRO6000 / "nccl_2gpu.csv")


def test_the_pcie5_collectives_are_fitted_and_the_pro_6000_carries_the_all_reduce(pcie5):
    """The fitted curve against the 24 NCCL sizes (4 KiB to 20 MiB) of each collective: within
    the profile's own spread (its three runs differ by up to 11 % at small sizes), below the
    link's raw 63 GB/s; the catalog carries the all-reduce fit to 4 significant digits, and
    its uncertainty is the fit's with vLLM's own all-reduce (unmeasured) in quadrature."""
    from des.tools.network import CATALOG_COLLECTIVES, _sig

    assert sorted(pcie5) == ["all_gather", "all_reduce"]
    for kind, d in pcie5.items():
        assert d.points == 24 and d.median_abs_error < 0.05 and d.log_sd < 0.10, kind
        assert 0.3 < d.cost.bus_bandwidth / 63e9 < 1.0 and 5e-6 < d.cost.latency < 3e-5, kind
    link = catalog.gpu("rtx-pro-6000-server").link
    ar = pcie5["all_reduce"].cost
    assert "rtx-pro-6000-server" in CATALOG_COLLECTIVES and link.provenance == "fitted"
    assert "nccl_2gpu.csv" in link.basis
    rounded = type(ar)(latency=_sig(ar.latency), bus_bandwidth=_sig(ar.bus_bandwidth))
    assert link.kind == "pcie_p2p" and link.nccl == {2: rounded}
    ag = pcie5["all_gather"].cost
    assert link.all_gather == {2: type(ag)(latency=_sig(ag.latency), bus_bandwidth=_sig(ag.bus_bandwidth))}
    assert link.uncertainty == _sig(log_sd(pcie5["all_reduce"].log_sd, CUSTOM_SD), 2)
    # NCCL at 16 MiB (above vLLM's 8 MiB limit for its own): the catalog's cost is the measured one
    assert link.seconds(16 * MiB, 2) == pytest.approx(471.12e-6, rel=0.05)
    # the Workstation Edition on the same PCIe 5.0 x16: the fit as it is, less certain
    work = catalog.gpu("rtx-pro-6000").link
    assert work.provenance == "transferred" and (work.nccl, work.all_gather) == (link.nccl, link.all_gather)
    assert work.uncertainty > link.uncertainty


def _profile_step(model: str, folder: str, tp: int, tokens: int, rows: int, attention: tuple[int, int, int, int]):
    """Seconds of one step of the whole model built from the profile's operators (as its
    README derives step times) at TP ``tp``, and the collectives vLLM adds (the fitted NCCL
    curves through the measured sizes): per layer the operators of ``dense.csv``, the
    attention row and two all-reduces of ``tokens × hidden`` bf16; per step the embedding
    (and its all-reduce: ``VocabParallelEmbedding``), the final norm, the LM head, the
    logits' all-gather (``LogitsProcessor``) and the sampler. Also: the all-reduces' part,
    and Qwen3's q/k norms, which des leaves out."""
    import pandas as pd

    from des.tools.network import fit_collectives

    m = catalog.model(model)
    base = PRO6000 / folder / "bf16" / f"tp{tp}"
    dense = pd.read_csv(base / "dense.csv")
    per_seq = pd.read_csv(base / "per_sequence.csv")
    att = pd.read_csv(base / "attention.csv")
    op = dense[dense.tokens == tokens].set_index("layer").time_us * 1e-6
    c, kp, n, kd = attention
    a = att.query("prefill_chunk == @c and kv_prefill == @kp and n_decode == @n and kv_decode == @kd").time_us
    layer = op[["qkv_proj", "o_proj", "gate_up_proj", "down_proj", "act_fn", "rotary_emb"]].sum()
    layer += 2 * op["layernorm"] + a.iloc[0] * 1e-6
    head = per_seq.query("sequences == @rows").set_index("layer").time_us * 1e-6
    step = op["embedding"] + op["final_layernorm"] + head["lm_head"] + head["sampler"]
    coll = fit_collectives(PRO6000 / "nccl_2gpu.csv")
    ar = (2 * m.num_layers + 1) * coll["all_reduce"].cost.seconds(tokens * m.hidden_size * 2, 2) if tp > 1 else 0.0
    gather = coll["all_gather"].cost
    ag = gather.latency + (tp - 1) * rows * m.vocab_size // tp * 2 / gather.bus_bandwidth if tp > 1 else 0.0
    qk_norm = m.num_layers * op.get("qk_norm", 0.0)
    return m.num_layers * layer + step + ar + ag, ar, ag, qk_norm


@pytest.mark.parametrize(
    ("batch", "context", "prefill"),
    [(1, 1024, 0), (16, 1024, 0), (64, 1024, 0), (256, 1024, 0), (0, 0, 512), (0, 0, 2048)],
)
def test_the_tp2_step_of_qwen3_32b_is_the_profiles_operators_plus_its_collectives(batch, context, prefill):
    """Qwen3-32B on two RTX PRO 6000 Server Edition (the catalog's fitted factors and PCIe
    link), eager: des's step against the profile's sum of operators and the
    collectives vLLM runs (2 all-reduces per layer, the embedding's, the logits' all-gather),
    within twice the sd the catalog's uncertainty gives that step (each group's share times
    its sd, in quadrature); the all-reduces alone as the fitted NCCL curve (or, below vLLM's
    8 MiB limit, its own all-reduce within that curve's largest error and the 0.25 sd stated
    for it), the all-gather as its fit; and what des leaves out (Qwen3's q/k norms) under 1.5 %."""
    from des.cost.base import BatchShape
    from des.cost.roofline import Engine
    from des.tools.network import fit_collectives

    gpu = catalog.gpu("rtx-pro-6000-server")
    m = catalog.model("qwen3-32b")
    r = build_roofline(gpu, m, tp=2, engine=Engine(enforce_eager=True))
    if prefill:
        tokens, rows, row = prefill, 1, (prefill, 0, 0, 0)
        shape = BatchShape(num_seqs=1, prefill_tokens=prefill, prefill_pairs=prefill * (prefill + 1) / 2,
                           prefill_context=prefill, num_emitting=1)  # fmt: skip
    else:
        tokens, rows, row = batch, batch, (0, 0, batch, context)
        shape = BatchShape(num_seqs=batch, decode_tokens=batch, decode_context=batch * context, num_emitting=batch)
    measured, ar_measured, ag_measured, qk_norm = _profile_step("qwen3-32b", "Qwen/Qwen3-32B", 2, tokens, rows, row)
    b = r.breakdown(shape)
    parts: dict[str, float] = {
        "gemm": b["gemm"] + b["lm_head"],
        "attention": b["attention_prefill"] + b["attention_decode"],
        "elementwise": b["elementwise"] + b["sampler"],
        "communication": b["allreduce"] + b["logits_gather"],
    }
    des_step = sum(parts.values())
    assert des_step == pytest.approx(b["gpu"] - b["kv_write"], rel=1e-12)  # every GPU term is in a part
    u: dict[str, float] = {str(k): v for k, v in gpu.efficiency.uncertainty.items()}
    u["communication"] = gpu.link.uncertainty
    sd = math.sqrt(sum((v / des_step * u[k]) ** 2 for k, v in parts.items()))
    assert abs(math.log(des_step / measured)) < 2 * sd, (des_step, measured, sd)
    worst = fit_collectives(PRO6000 / "nccl_2gpu.csv")["all_reduce"].max_abs_error
    if tokens * m.hidden_size * 2 >= gpu.link.custom_limit(2):  # NCCL: the fitted curve itself
        assert b["allreduce"] == pytest.approx(ar_measured, rel=2e-3)  # the catalog's 4 significant digits
    else:
        assert abs(b["allreduce"] / ar_measured - 1) < worst + CUSTOM_SD
    assert b["logits_gather"] == pytest.approx(ag_measured, rel=2e-3)  # the catalog's 4 significant digits
    assert qk_norm / measured < 0.015  # 1.1 % of the step at 256 decodes, 1.0 % of a 2048-token prefill


def test_calibrate_network_fits_the_two_gpu_profile_per_collective(pcie5):
    res = des_cli("calibrate", "--network", str(PRO6000))
    assert res.returncode == 0, res.stderr
    for kind, d in pcie5.items():
        name = "rtxpro6000-vllm-kernel-profile" + ("" if kind == "all_reduce" else f" {kind}")
        row = next(line for line in res.stdout.splitlines() if f" {name} " in line)
        assert f"{d.cost.latency * 1e6:.1f} us" in row and f"{d.cost.bus_bandwidth / 1e9:.1f} GB/s" in row, row
    assert "rtx-pro-6000-server: carries rtxpro6000-vllm-kernel-profile's fit" in res.stdout


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("collective,size,us\nall_reduce,4096,12\n", "columns must be collective,bytes,us"),
        ("collective,bytes,us\nall_reduce,4096,-1\n", "row 1: us"),
        ("collective,bytes,us\nbroadcast,4096,12\n", "'broadcast' is not one of"),
        ("collective,bytes,us\nall_reduce,4096,12\n", "at least 8 rows"),
    ],
)
def test_a_bad_two_gpu_profile_exits_2_with_one_line(tmp_path, text, words):
    (tmp_path / "nccl_2gpu.csv").write_text(text)
    res = des_cli("calibrate", "--network", str(tmp_path))
    assert res.returncode == 2 and "Traceback" not in res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --network:") and words in lines[0], lines
