"""Speculative decoding's acceptance law and settings (des.engine.speculative).

The sampler is checked against its exact law: ``α = 1`` yields ``k + 1`` tokens every
step, ``k = 0`` or ``α = 0`` one token and no draw, and over many steps the mean tokens
per step lies within 4 standard errors (``sqrt(Var[T] / n)``, ``Var[T]`` exact) of
``(1 - α^(k+1)) / (1 - α)``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from pydantic import ValidationError

from des.engine.speculative import Acceptance, SpeculativeConfig, expected_tokens, tokens_second_moment
from des.simulation import STREAMS, _generators

N = 200_000


def test_k_zero_and_alpha_zero_emit_one_token_and_draw_nothing():
    for k, alpha in [(0, 0.7), (0, 1.0), (3, 0.0)]:
        rng = np.random.default_rng(1)
        out = Acceptance(k, alpha, rng).draw(np.full(50, 10))
        assert (out == 1).all()
        assert rng.random() == np.random.default_rng(1).random()  # the stream did not move


def test_alpha_one_yields_k_plus_one_tokens_exactly():
    rng = np.random.default_rng(2)
    out = Acceptance(4, 1.0, rng).draw(np.full(1000, 100))
    assert (out == 5).all()


def test_never_beyond_the_remaining_output():
    remaining = np.arange(1, 9).repeat(5000)
    out = Acceptance(5, 0.9, np.random.default_rng(3)).draw(remaining)
    assert (out >= 1).all()
    assert (out <= remaining).all()
    assert (out <= 6).all()
    assert (Acceptance(5, 1.0, np.random.default_rng(3)).draw(remaining) == np.minimum(remaining, 6)).all()


@pytest.mark.parametrize(("k", "alpha"), [(1, 0.5), (3, 0.6), (5, 0.8), (7, 0.3), (4, 0.95)])
def test_mean_tokens_per_step_matches_the_formula(k, alpha):
    out = Acceptance(k, alpha, np.random.default_rng(1000 + k)).draw(np.full(N, 10_000))
    mean = expected_tokens(alpha, k)
    var = tokens_second_moment(alpha, k) - mean**2
    assert var > 0
    assert abs(out.mean() - mean) < 4 * math.sqrt(var / N)
    assert abs(out.var() - var) < 0.05 * var  # the spread as well (4 SE of the variance is under 5 %)


@pytest.mark.parametrize(("k", "alpha"), [(1, 0.5), (4, 0.8), (6, 0.25)])
def test_distribution_matches_the_exact_pmf(k, alpha):
    out = Acceptance(k, alpha, np.random.default_rng(7)).draw(np.full(N, 10_000))
    pmf = [alpha ** (t - 1) * (1 - alpha) for t in range(1, k + 1)] + [alpha**k]
    assert math.isclose(sum(pmf), 1.0)
    for t, p in enumerate(pmf, start=1):
        assert abs((out == t).mean() - p) < 4 * math.sqrt(p * (1 - p) / N)


def test_formula_closed_forms():
    assert expected_tokens(0.0, 5) == 1.0
    assert expected_tokens(1.0, 5) == 6.0
    assert expected_tokens(0.5, 0) == 1.0
    assert math.isclose(expected_tokens(0.5, 2), 1.75)
    assert math.isclose(tokens_second_moment(0.5, 2), 1 + 3 * 0.5 + 5 * 0.25)


def test_same_seed_same_draws():
    a = Acceptance(3, 0.7, _generators(11)["speculative"]).draw(np.full(1000, 50))
    b = Acceptance(3, 0.7, _generators(11)["speculative"]).draw(np.full(1000, 50))
    c = Acceptance(3, 0.7, _generators(12)["speculative"]).draw(np.full(1000, 50))
    assert (a == b).all()
    assert not (a == c).all()


def test_the_new_stream_leaves_the_others_draws_unmoved():
    assert STREAMS[-1] == "speculative"
    gens = _generators(5)
    children = np.random.SeedSequence(5).spawn(len(STREAMS) - 1)
    for name, seq in zip(STREAMS[:-1], children, strict=True):
        assert gens[name].random() == np.random.default_rng(seq).random()


def test_config_reads_vllm_fields():
    cfg = SpeculativeConfig(method="draft", model="qwen2.5-0.5b", num_speculative_tokens=4, acceptance_rate=0.7)
    assert math.isclose(cfg.expected_tokens, (1 - 0.7**5) / 0.3)
    assert SpeculativeConfig(method="ngram", num_speculative_tokens=0, acceptance_rate=0.5).expected_tokens == 1.0
    assert SpeculativeConfig(method="mtp", num_speculative_tokens=1, acceptance_rate=1).expected_tokens == 2.0


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"method": "draft", "num_speculative_tokens": 3, "acceptance_rate": 0.5}, "method draft needs a model"),
        ({"method": "eagle", "num_speculative_tokens": 3, "acceptance_rate": 0.5}, "method eagle needs a model"),
        ({"method": "ngram", "model": "x", "num_speculative_tokens": 3, "acceptance_rate": 0.5}, "takes no model"),
        ({"method": "ngram", "num_speculative_tokens": 3, "acceptance_rate": 1.5}, "acceptance_rate"),
        ({"method": "ngram", "num_speculative_tokens": 3, "acceptance_rate": -0.1}, "acceptance_rate"),
        ({"method": "ngram", "num_speculative_tokens": -1, "acceptance_rate": 0.5}, "num_speculative_tokens"),
        ({"method": "medusa", "num_speculative_tokens": 1, "acceptance_rate": 0.5}, "method"),
        ({"method": "ngram", "num_speculative_tokens": 1, "acceptance_rate": 0.5, "k": 2}, "k"),
    ],
)
def test_bad_settings_name_the_field(fields, words):
    with pytest.raises(ValidationError, match=words):
        SpeculativeConfig(**fields)
