"""The Llama as MLC-LLM exports its own models (``zoo.mlc_llama.mlc_style``): a symbolic
``vocab_size`` in the weights, the head tied to the embeddings through
``embed_tokens.lm_head_forward``, the engine's batch entries and a ``ModuleSpec`` —
named, sized and served as MLC-LLM's engine serves them, built by real TVM for llvm."""

from __future__ import annotations

import pytest

import relaytrace
from relaytrace.analysis.report import make_report
from relaytrace.errors import UsageError
from relaytrace.frontends.nn import from_nn
from relaytrace.model.entry import PAGED_DECODE, PAGED_PREFILL, RAGGED_PREFILL, DimRole, kernel_role, step_shape
from relaytrace.model.profile import CACHE
from relaytrace.profiling.serve import Serving
from relaytrace.zoo.mlc_llama import mlc_style

HIDDEN, VOCAB, BLOCKS = 64, 320, 2  # the vocabulary unlike any other dim


@pytest.fixture(scope="module")
def built():
    module, spec = mlc_style(layers=BLOCKS, hidden=HIDDEN, vocab_size=VOCAB)
    return relaytrace.build(from_nn(module, spec, name="mlc"), "llvm")


def _serve(built, entry, **serving):
    executable, lineage = built
    prof = relaytrace.profile(executable, lineage, [], entry=entry, serving=Serving(**serving), repeat=1)
    return make_report(lineage, prof)


def _head_sites(report):
    """The layer of each kernel share that computes the logits (a matmul: activations,
    weight, and an output whose last dim is the vocabulary), with its argument shapes."""
    out = []
    for share in report.shares:
        arg = report.profile.arg(share.key)
        if arg is not None and len(arg.shapes) == 3 and arg.shapes[-1] and arg.shapes[-1][-1] == VOCAB:
            out.append((share.layer, arg.shapes))
    return out


def test_the_model_gives_its_symbolic_vocab_size_and_the_weights_are_marked(built):
    _, lineage = built
    assert lineage.program.sizes == {"vocab_size": VOCAB}
    decode = lineage.build.params["batch_decode"]
    assert [(p.name, p.weight) for p in decode] == [
        ("input_embeds", False),
        ("paged_kv_cache", False),
        ("packed_params", True),
    ]
    assert step_shape(decode).roles == {"batch_size": DimRole.SEQUENCES, "vocab_size": DimRole.MODEL}
    prefill = step_shape(lineage.build.params["batch_prefill"])
    assert prefill.packed and prefill.roles["seq_len"] == DimRole.TOKENS
    assert prefill.roles["batch_size"] == DimRole.SEQUENCES  # logit_positions: one per sequence
    # a decode's token count is static, whatever symbolic dims its weights have
    assert step_shape(lineage.build.params["decode"]).of(DimRole.TOKENS) == ()


def test_the_tied_head_a_method_of_the_embeddings_is_that_module_verified(built):
    report = _serve(built, "decode", context=8)
    heads = _head_sites(report)
    assert heads and {layer for layer, _ in heads} == {"model.embed_tokens"}
    layer = next(r for r in report.layers if r.layer == "model.embed_tokens")
    assert layer.status == "verified"
    assert "matmul" in layer.ops and "permute_dims" in layer.ops


def test_a_batch_decode_serves_each_sequence_one_token_through_the_decode_kernel(built):
    """Eight sequences of 64 tokens need 40 pages of 16: the cache is made with room for
    each sequence's whole pages."""
    _, lineage = built
    cache = lineage.build.kv_cache
    report = _serve(built, "batch_decode", context=64, sequences=8)
    prof = report.profile
    assert prof.step == (1, 64) and prof.sequences == 8
    assert prof.inputs == (("input_embeds", (8, 1, HIDDEN), "float32"),)
    assert prof.bound == (("vocab_size", VOCAB, "the model's vocab_size"),)
    ran = {kernel_role(cache, r.name) for r in prof.records if r.kind == CACHE}
    assert PAGED_DECODE in ran and not ran & {RAGGED_PREFILL, PAGED_PREFILL}
    decode = next(r.name for r in prof.records if kernel_role(cache, r.name) == PAGED_DECODE)
    roofs = [r for key, r in report.roofline.sites.items() if key.kernel == decode]
    # each of the eight sequences' token over its context and itself: QK^T and PV, a multiply and an add each
    assert [r.flops for r in roofs] == [8 * 4 * cache.q_heads * cache.head_dim * (64 + 1)] * BLOCKS
    # the head ran at the model's vocabulary for the batch's eight tokens, not at the token count
    assert {shapes[0] for _, shapes in _head_sites(report)} == {(8, 1, HIDDEN)}
    assert "1 token(s) for each of 8 sequences after 64; vocab_size=320" in prof.summary()
    assert report.memory is not None  # the weights' sizes are known: the memory line stays


def test_a_decode_after_a_context_fills_it_through_the_prefill_and_sizes_the_head_by_the_model(built):
    report = _serve(built, "decode", context=40)
    assert report.profile.step == (1, 40) and report.profile.inputs == (("input_embed", (1, 1, HIDDEN), "float32"),)
    assert all(shapes[-1] == (1, 1, VOCAB) for _, shapes in _head_sites(report))


def test_a_batch_prefill_packs_every_sequences_tokens_in_one_row(built):
    report = _serve(built, "batch_prefill", tokens=6, sequences=3)
    inputs = dict((n, s) for n, s, _ in report.profile.inputs)
    assert inputs == {"input_embeds": (1, 18, HIDDEN), "logit_positions": (3,)}
    assert {shapes[-1] for _, shapes in _head_sites(report)} == {(1, 3, VOCAB)}


def test_a_dim_the_model_gives_no_value_is_refused_in_one_line_or_bound(built, monkeypatch):
    executable, lineage = built
    import attrs

    silent = attrs.evolve(lineage, program=attrs.evolve(lineage.program, sizes={}))
    with pytest.raises(UsageError, match=r"'vocab_size' has no value .*--bind vocab_size=VALUE"):
        relaytrace.profile(executable, silent, [], entry="decode", serving=Serving(context=4), repeat=1)
    prof = relaytrace.profile(
        executable, silent, [], entry="decode", serving=Serving(context=4, bind={"vocab_size": VOCAB}), repeat=1
    )
    assert prof.bound == (("vocab_size", VOCAB, "--bind"),)


def test_batch_on_an_entry_of_one_sequence_is_refused(built):
    executable, lineage = built
    with pytest.raises(UsageError, match="decode serves one sequence"):
        relaytrace.profile(executable, lineage, [], entry="decode", serving=Serving(sequences=4), repeat=1)


FACTORY = """from relaytrace.zoo.mlc_llama import mlc_style


def make():
    return mlc_style(layers=1)
"""


def test_the_cli_estimates_a_batch_decode_of_packed_parameters_sized_by_the_model(tmp_path, capsys):
    from relaytrace import cli
    from relaytrace.model.lineage import Lineage
    from relaytrace.model.profile import Profile

    (tmp_path / "llm.py").write_text(FACTORY)
    out = tmp_path / "estimate"
    args = ["estimate", f"{tmp_path / 'llm.py'}:make", "--entry", "batch_decode", "--context", "4096", "--batch", "8"]
    assert cli.main([*args, "--device", "nvidia-a100-sxm4-80gb", "--out", str(out)]) == 0
    assert "estimated served step: 1 token(s) for each of 8 sequences after 4096; vocab_size=256" in (
        capsys.readouterr().out
    )
    prof, lineage = Profile.load(out / "profile.json"), Lineage.load(out / "lineage.json")
    assert prof.sequences == 8 and prof.inputs[0] == ("input_embeds", (8, 1, HIDDEN), "float32")
    cache = lineage.build.kv_cache
    decode = [r for r in prof.records if kernel_role(cache, r.name) == PAGED_DECODE]
    a100_bytes_per_us = 2039e3  # 2,039 GB/s
    q, kv, d = cache.q_heads, cache.kv_heads, cache.head_dim
    moved = 8 * (2 * 1 * q * d + 2 * 4097 * kv * d) * 4  # each sequence's query and output, its 4097 keys and values
    assert [r.duration_us for r in decode] == [pytest.approx(moved / a100_bytes_per_us)]  # one block


def test_advice_names_the_weight_transposes_run_in_every_decode_step(built):
    from relaytrace.analysis.advice import WeightOnlyCompute, advise

    report = _serve(built, "decode", context=16)
    (found,) = [f for f in advise(report) if f.rule == WeightOnlyCompute.name]
    lineage = report.lineage
    transposes = [  # every kernel that transposes a parameter: one per Linear and the tied head
        s.label for s in lineage.call_sites if {lineage.origins[o].short_op for o in s.origin_ids} == {"permute_dims"}
    ]
    assert sorted(found.sites) == sorted(transposes) and len(transposes) == 4 * BLOCKS + 1
    assert {"model.embed_tokens", "model.layers.0.self_attn.qkv_proj"} <= set(found.layers)
    assert found.saving_us == pytest.approx(sum(report.site_us[s] for s in transposes))
    assert "LiftTransformParams" in found.change.how
    # a kernel fed by another's output or by the step's input is not weights alone
    assert not any("matmul" in s or "rms_norm" in s for s in found.sites)


@pytest.mark.slow  # five builds and profiles
def test_advise_verify_rebuilds_with_the_weight_transposes_lifted_out_of_the_step(tmp_path, capsys):
    from relaytrace import cli

    (tmp_path / "llm.py").write_text(FACTORY)
    out = tmp_path / "decode"
    args = ["profile", f"{tmp_path / 'llm.py'}:make", "--entry", "decode", "--context", "16", "--repeat", "2"]
    assert cli.main([*args, "--out", str(out)]) == 0
    capsys.readouterr()
    assert cli.main(["advise", str(out), "--verify", "--repeat", "2"]) == 0
    said = capsys.readouterr().out
    assert "weight-only-compute with lift_params True: end to end" in said
    assert "still run in every call" not in said and "kernels are the same" not in said  # it applied
    # the 5 layers' times before and after are said (4 Linears, the head); not compared here: at 50 us
    # a step and 2 runs, which is smaller is the machine's noise (benchmarks measure times, tests do not)
    assert any(line.startswith("its 5 layer(s): ") and " -> " in line for line in said.splitlines())


def test_the_cli_with_no_entry_serves_the_prompt_then_a_decode_step_in_one_run(tmp_path, capsys):
    """Through the CLI, of a factory returning a ``ModuleSpec``, as MLC-LLM's models give one."""
    import csv

    from relaytrace import cli
    from relaytrace.model.profile import Profile

    (tmp_path / "llm.py").write_text(FACTORY)
    out = tmp_path / "served"
    args = ["profile", f"{tmp_path / 'llm.py'}:make", "--tokens", "12", "--repeat", "1"]
    assert cli.main([*args, "--out", str(out)]) == 0
    said = capsys.readouterr().out
    assert "served one sequence: time to first token" in said and "(prefill, 12 token(s))" in said
    assert "(decode at context 12)" in said
    assert Profile.load(out / "profile.json").step == (1, 12)  # the report is the decode's
    with open(out / "steps.csv", newline="") as f:
        rows = {r["layer"]: r for r in csv.DictReader(f)}
    attention = rows["model.layers.0.self_attn"]
    assert float(attention["prefill_us"]) > 0 and float(attention["decode_us"]) > 0
    assert sum(float(r["decode_percent"]) for r in rows.values()) == pytest.approx(100, abs=0.1)
    with pytest.raises(SystemExit):
        cli.main(["profile", f"{tmp_path / 'llm.py'}:make", "--bind", "vocab_size=many"])
    assert "expected DIM=VALUE" in capsys.readouterr().err


@pytest.mark.slow  # eight served profiles; the fit itself is tests/pure/test_sweep.py's
def test_the_cli_sweeps_a_batch_decode_measured_and_bounded_on_a_named_device(tmp_path, capsys):
    import csv

    from relaytrace import cli

    (tmp_path / "llm.py").write_text(FACTORY)
    out = tmp_path / "sweep"
    args = ["sweep", f"{tmp_path / 'llm.py'}:make", "--entry", "batch_decode", "--context", "64,1024", "--batch", "1,8"]
    args += ["--repeat", "1", "--project", "8192", "--device", "nvidia-a100-sxm4-80gb"]
    assert cli.main([*args, "--out", str(out)]) == 0
    said = capsys.readouterr().out
    assert "fitted to 4 points (C = 64, 1024; B = 1, 8)" in said and "at 8192, B=8" in said
    assert "ESTIMATE, not a measurement" in said
    with open(out / "sweep.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    attention = [r for r in rows if r["layer"] == "model.layers.0.self_attn"]
    assert sorted((int(r["context"]), int(r["batch"])) for r in attention) == [(64, 1), (64, 8), (1024, 1), (1024, 8)]
    with open(out / "fits.csv", newline="") as f:
        measured = {r["layer"]: r for r in csv.DictReader(f)}
    assert {"model.layers.0.self_attn", "model.embed_tokens", "(step)"} <= set(measured)
    assert all(float(r["per_cached_token_us"]) >= 0 for r in measured.values())
    assert (out / "sweep.svg").read_text().startswith("<svg")
    page = (out / "report.html").read_text()  # the plot and each fit, measured and bounded, on one page
    assert page.count("<svg") == 2 and "ESTIMATE, not a measurement" in page
    assert all(f"<td>{layer}</td>" in page for layer in measured)
    assert "report.html" in said
    with open(out / "device_fits.csv", newline="") as f:
        fits = {r["layer"]: r for r in csv.DictReader(f)}
    # a decode's attention reads each cached token's key and value once: 2 x kv_heads x head_dim float32 of it
    per_token_us = 2 * 2 * 16 * 4 / 2039e3  # two key/value heads of 16, float32, at 2,039 GB/s
    attention = fits["model.layers.0.self_attn"]
    assert float(attention["per_cached_token_us"]) == pytest.approx(per_token_us, rel=0.01)
    assert float(attention["error_percent"]) < 1  # a bound is the curve exactly
