"""An LLM as TVM deploys one (MLC-LLM's way: tvm.relax.frontend.nn, nn.llm's paged KV
cache, packed parameters, entries embed / prefill / decode / create_paged_kv_cache),
built by real TVM for llvm and served through its own KV cache."""

from __future__ import annotations

import pytest

import relaytrace
from relaytrace.analysis.estimate import estimated_profile
from relaytrace.analysis.report import make_report
from relaytrace.errors import UsageError
from relaytrace.frontends.nn import from_nn
from relaytrace.model.entry import PAGED_DECODE, RAGGED_PREFILL, ParamKind, kernel_role
from relaytrace.model.peaks import named
from relaytrace.model.profile import CACHE
from relaytrace.profiling.serve import Serving
from relaytrace.render.provenance import provenance
from relaytrace.zoo.mlc_llama import llama

from .conftest import assert_holds_to_schema

HIDDEN, Q_HEADS, KV_HEADS, HEAD_DIM, INNER, VOCAB, BLOCKS = 64, 4, 2, 16, 128, 256, 2


@pytest.fixture(scope="module")
def built():
    module, spec = llama(layers=BLOCKS)
    return relaytrace.build(from_nn(module, spec, name="llama"), "llvm")


def _role_kernel(lineage, role):
    cache = lineage.build.kv_cache
    return next(k for k in cache.kernels if kernel_role(cache, k) == role)


def test_each_entry_is_recorded_as_compiled_with_every_parameter_and_its_kind(built):
    _, lineage = built
    params = lineage.build.params
    assert [(p.name, p.kind) for p in params["prefill"]] == [
        ("input_embed", ParamKind.TENSOR),
        ("paged_kv_cache", ParamKind.OBJECT),
        ("packed_params", ParamKind.TUPLE),
    ]
    packed = params["decode"][2].tensors
    # every weight, field by field: the embedding, six per block, the final norm, the head
    assert len(packed) == 1 + 6 * BLOCKS + 1 + 1
    block = [
        (HIDDEN,),
        ((Q_HEADS + 2 * KV_HEADS) * HEAD_DIM, HIDDEN),
        (HIDDEN, Q_HEADS * HEAD_DIM),
        (HIDDEN,),
        (2 * INNER, HIDDEN),
        (HIDDEN, INNER),
    ]  # norm, qkv_proj, o_proj, norm, gate_up_proj, down_proj
    assert sorted(t.shape for t in packed) == sorted([(VOCAB, HIDDEN)] + block * BLOCKS + [(HIDDEN,), (VOCAB, HIDDEN)])
    assert {p.kind for p in params["create_paged_kv_cache"]} == {ParamKind.SHAPE}
    assert params["prefill"][0].tensors[0].shape == (1, "seq_len", HIDDEN)


def test_the_kv_cache_and_the_kernels_handed_to_it_are_in_the_lineage(built):
    _, lineage = built
    cache = lineage.build.kv_cache
    assert cache.entry == "create_paged_kv_cache" and cache.builtin.endswith("paged_attention_kv_cache_create")
    assert (cache.q_heads, cache.kv_heads, cache.head_dim) == (Q_HEADS, KV_HEADS, HEAD_DIM)
    assert "prefill" in _role_kernel(lineage, RAGGED_PREFILL) and "decode" in _role_kernel(lineage, PAGED_DECODE)
    saved = lineage.to_json()
    assert type(lineage).from_json(saved).build.kv_cache == cache


@pytest.fixture(scope="module")
def served(built):
    executable, lineage = built
    prefill = relaytrace.profile(executable, lineage, [], entry="prefill", serving=Serving(tokens=12), repeat=2)
    decode = relaytrace.profile(executable, lineage, [], entry="decode", serving=Serving(context=20), repeat=2)
    return make_report(lineage, prefill), make_report(lineage, decode)


def test_a_prefill_and_a_decode_are_served_through_the_models_own_kv_cache(served, built):
    _, lineage = built
    prefill, decode = served
    assert prefill.profile.step == (12, 0) and decode.profile.step == (1, 20)
    assert prefill.profile.inputs == (("input_embed", (1, 12, HIDDEN), "float32"),)
    for report, attention in ((prefill, RAGGED_PREFILL), (decode, PAGED_DECODE)):
        cache_calls = [r for r in report.profile.records if r.kind == CACHE and r.run == 0]
        ran = [r.name for r in cache_calls]
        assert ran.count(_role_kernel(lineage, attention)) == BLOCKS  # once per block
        assert all(r.within.startswith("vm.builtin.attention_kv_cache_attention_with_fused_qkv#") for r in cache_calls)


def test_the_attention_layers_hold_the_kv_cache_kernels_time_verified(served, built):
    _, lineage = built
    cache = set(lineage.build.kv_cache.kernels)
    for report, role in zip(served, (RAGGED_PREFILL, PAGED_DECODE)):
        cache_shares = [s for s in report.shares if s.key.kernel in cache]
        assert {s.layer for s in cache_shares} == {f"model.layers.{i}.self_attn" for i in range(BLOCKS)}
        assert all(s.status == "verified" for s in cache_shares)
        # every microsecond of the VM's kernels and the cache's is billed to a layer
        assert sum(s.us for s in report.shares) == pytest.approx(report.profile.kernel_us)
        attention = next(r for r in report.kernels if r.name == _role_kernel(lineage, role))
        assert attention.count == BLOCKS and len(attention.layers) == BLOCKS and attention.status == "verified"
        attn = next(r for r in report.layers if r.layer == "model.layers.0.self_attn")
        assert attn.us >= sum(s.us for s in cache_shares if s.layer == "model.layers.0.self_attn")


ROTATED, FUSED_QKV = (Q_HEADS + KV_HEADS) * HEAD_DIM, (Q_HEADS + 2 * KV_HEADS) * HEAD_DIM  # per token


def cache_by_hand(tokens, context):
    """FLOPs and bytes of the KV-cache kernels one attention builtin runs for a step of
    ``tokens`` after ``context`` (float32): RoPE (6 FLOPs per rotated query or key
    element: two divides, x·cos, rot(x)·sin, the negation, the add; reads QKV and
    positions, writes Q, K, V), the append (reads the new keys and values, writes them
    into the pages), the attention (4
    FLOPs per head-dim element per (query, key) pair; queries, keys and values
    attended, output); a decode's pairs are its token with the context and itself, a
    ragged prefill's causal among its tokens."""
    pairs, keys = (context + 1, context + 1) if tokens == 1 else (tokens * (tokens + 1) // 2, tokens)
    flops = 6 * ROTATED * tokens + 4 * Q_HEADS * HEAD_DIM * pairs
    rope = (2 * FUSED_QKV * 4 + 4) * tokens
    append = 2 * 2 * tokens * KV_HEADS * HEAD_DIM * 4
    attention = (2 * tokens * Q_HEADS * HEAD_DIM + 2 * keys * KV_HEADS * HEAD_DIM) * 4
    return flops, rope + append + attention


def test_an_attention_layers_work_holds_the_kv_cache_kernels_it_ran(served, built):
    """The cache's kernels run inside the attention builtin; their FLOPs and bytes are
    the attention layer's, as their time is, beside its own kernels' (reshapes)."""
    _, lineage = built
    for report, (tokens, context) in zip(served, ((12, 0), (1, 20))):
        cache = {k for k, r in report.roofline.sites.items() if k.kernel in lineage.build.kv_cache.kernels}
        for i in range(BLOCKS):
            layer = report.roofline.layer(f"model.layers.{i}.self_attn")
            own = [s.key for s in report.shares if s.layer == layer.name and s.key not in cache]
            flops, moved = cache_by_hand(tokens, context)
            assert layer.flops == flops and layer.useful == flops
            assert sum(report.roofline.sites[k].flops for k in own) == 0
            assert layer.bytes == pytest.approx(moved + sum(report.roofline.sites[k].bytes for k in own))
            assert layer.bound_us > 0 and layer.bound_by is not None


@pytest.mark.parametrize("context", [7, 40])
def test_decode_attention_flops_equal_a_hand_count_at_each_context(built, context):
    executable, lineage = built
    prof = relaytrace.profile(executable, lineage, [], entry="decode", serving=Serving(context=context), repeat=1)
    report = make_report(lineage, prof)
    decode = _role_kernel(lineage, PAGED_DECODE)
    roofs = [r for key, r in report.roofline.sites.items() if key.kernel == decode]
    # one query token over the context and itself: QK^T and PV, a multiply and an add each
    assert [r.flops for r in roofs] == [4 * Q_HEADS * HEAD_DIM * (context + 1)] * BLOCKS


def test_an_estimate_bounds_decode_attention_by_its_context(built):
    _, lineage = built
    a100 = named("nvidia-a100-sxm4-80gb")
    decode = _role_kernel(lineage, PAGED_DECODE)

    def attention_us(context):
        prof = estimated_profile(lineage, a100, entry="decode", context=context)
        return sum(r.duration_us for r in prof.records if r.name == decode)

    short, long = attention_us(256), attention_us(4096)
    assert short > 0 and 12 < long / short < 17  # its keys and values grow 16x; the query does not


@pytest.mark.parametrize(
    "target, entry",
    [pytest.param("cuda", "decode", marks=pytest.mark.slow), ("llvm", "prefill")],  # a cuda build: among the slow
)
def test_the_cli_estimates_a_packed_parameter_llm_as_the_api_does(tmp_path, target, entry):
    """One signature per entry, its parameters' tensors as compiled (the packed weights
    field by field): the estimate's inputs are the ones the report's check of a profile
    against its lineage reads, so the CLI gives what ``estimated_profile`` gives."""
    from relaytrace import cli
    from relaytrace.model.lineage import Lineage
    from relaytrace.model.profile import Profile

    (tmp_path / "llm.py").write_text(FACTORY)
    out, a100 = tmp_path / "estimate", named("nvidia-a100-sxm4-80gb")
    step = ["--context", "4096"] if entry == "decode" else ["--tokens", "16"]
    model = f"{tmp_path / 'llm.py'}:make"
    args = ["estimate", model, "--target", target, "--device", a100.device, "--entry", entry, *step, "--out", str(out)]
    assert cli.main(["--quiet", *args]) == 0
    lineage, saved = Lineage.load(out / "lineage.json"), Profile.load(out / "profile.json")
    assert [n for n, _, _ in saved.inputs][:3] == ["input_embed", "packed_params[0]", "packed_params[1]"]
    shapes = {"input_embed": (1, 16, HIDDEN)} if entry == "prefill" else None
    api = estimated_profile(lineage, a100, entry=entry, shapes=shapes, context=4096 if entry == "decode" else None)
    assert saved.records == api.records and saved.step == api.step
    role = PAGED_DECODE if entry == "decode" else RAGGED_PREFILL
    attention = [r.duration_us for r in saved.records if r.name == _role_kernel(lineage, role)]
    # memory-bound on an A100 (2,039 GB/s): the queries, keys and values attended and the output, once
    tokens, keys = (1, 4096 + 1) if entry == "decode" else (16, 16)
    moved = (2 * tokens * Q_HEADS * HEAD_DIM + 2 * keys * KV_HEADS * HEAD_DIM) * 4
    assert attention == [pytest.approx(moved / 2039e3)] * BLOCKS
    layers = {row["layer"]: row for row in _csv(out / "layers.csv")}
    assert float(layers["model.layers.0.self_attn"]["flops"]) == cache_by_hand(tokens, keys - tokens)[0]


def test_a_served_entry_is_profiled_in_timeline_mode_only(built):
    executable, lineage = built
    with pytest.raises(UsageError, match="timeline mode"):
        relaytrace.profile(executable, lineage, [], entry="decode", mode="isolated")


def test_serving_options_without_meaning_or_past_the_caches_count_are_refused(built):
    """--tokens on a decode (its step is one token, fixed by its inputs) was ignored while
    run.json recorded it; a context past the runtime's int32 slot count left run.py a
    bad_alloc; a bundle's serve spec with page_size 0 died by SIGFPE."""
    from relaytrace.commands.options import Served
    from relaytrace.commands.shared import serving
    from relaytrace.model.codec import encode
    from relaytrace.profiling.runner import kvcache
    from relaytrace.profiling.serve import served_spec

    _, lineage = built
    given = Served(tokens=5)
    with pytest.raises(UsageError, match="decode runs 1 token.s. per sequence per step, fixed by its inputs"):
        serving(given, lineage, "decode")
    assert serving(given, lineage, "prefill").tokens == 5
    with pytest.raises(UsageError, match=r"needs 2147483\d+ token slots, more than the runtime counts"):
        served_spec(lineage, "decode", Serving(context=2**31))
    spec = encode(served_spec(lineage, "decode", Serving(context=24)))  # as a bundle's run.py reads it
    assert kvcache.serving_problem(spec) is None
    assert "page_size is 0: a whole number at least 1" in kvcache.serving_problem({**spec, "page_size": 0})
    assert "context is -1" in kvcache.serving_problem({**spec, "context": -1})


def test_a_cache_beyond_the_machines_memory_is_refused_in_its_bytes_before_it_is_made(built):
    """Issue 54: a context whose cache the machine cannot hold ran past 100 s, said
    nothing, then failed in the runtime; it is refused with its bytes, before the cache
    is made. The bytes a token slot holds are the page tensors' the runtime allocates."""
    from relaytrace.profiling.runner import kvcache
    from relaytrace.profiling.serve import kv_bytes_per_token

    executable, lineage = built
    each = kv_bytes_per_token(lineage, "decode")
    assert each == BLOCKS * 2 * KV_HEADS * HEAD_DIM * 4  # keys and values, float32, of every layer
    context = kvcache.machine_memory() // each + 1000
    with pytest.raises(UsageError, match=r"token slots of \d+ bytes of keys and values each, .* GiB, more than the"):
        relaytrace.profile(executable, lineage, [], entry="decode", serving=Serving(context=context), repeat=1)
    said = []
    prof = relaytrace.profile(
        executable, lineage, [], entry="decode", serving=Serving(context=24), repeat=1, progress=said.append
    )
    assert "filling a context of 24 tokens for each of 1 sequence(s)" in said
    (_, kv, kv_heads, _, head_dim), dtype = prof.kv_pages[0]
    assert each == BLOCKS * kv * kv_heads * head_dim * 4 and dtype == "float32"


def test_a_context_is_filled_in_chunks_as_an_engine_fills_a_prompt_and_said_as_it_goes(built):
    """Issue 54: a long context was filled by one prefill call of all its tokens, with no
    word while it ran (and a prefill's activations for all of them at once). Filled in
    chunks, the cache holds the whole context, the step runs after it and is taken back."""
    import tvm
    import tvm_ffi
    from tvm import relax

    from relaytrace.profiling.serve import Server, served_spec

    executable, lineage = built
    said = []
    spec = served_spec(lineage, "decode", Serving(context=40, fill_chunk=16))
    server = Server(relax.VirtualMachine(executable, tvm.cpu()), tvm.cpu(), spec, say=said.append)
    assert said == [
        "filling a context of 40 tokens for each of 1 sequence(s) in 3 chunks of up to 16",
        "filled 16 of 40 tokens of sequence 1 of 1",
        "filled 32 of 40 tokens of sequence 1 of 1",
        "filled 40 of 40 tokens of sequence 1 of 1",
    ]
    length = tvm_ffi.get_global_func("vm.builtin.attention_kv_cache_get_sequence_length")
    assert length(server.cache, 0) == 40  # the runtime's own count of the tokens in the cache
    server.step()
    assert length(server.cache, 0) == 40
    with pytest.raises(UsageError, match="fill_chunk=. must be a whole number of tokens at least 1, not 0"):
        served_spec(lineage, "decode", Serving(context=4, fill_chunk=0))


def test_memory_counts_the_kv_cache_pages_the_run_allocated(built):
    executable, lineage = built
    prof = relaytrace.profile(executable, lineage, [], entry="decode", serving=Serving(context=40), repeat=1)
    for data, file in (
        (prof.to_json(), "profile.json"),  # an LLM's files hold to their schemas: its cache, steps and pages
        (lineage.to_json(), "lineage.json"),
        (lineage.code.to_json(), "code.json"),
        (provenance(lineage).to_json(), "provenance.json"),
    ):
        assert_holds_to_schema(data, file)
    memory = make_report(lineage, prof).memory
    assert len(memory.kv_pages) == BLOCKS  # one page tensor per layer
    (pages, kv, kv_heads, page_size, head_dim), dtype = memory.kv_pages[0]
    assert (kv, kv_heads, page_size, head_dim, dtype) == (2, KV_HEADS, 16, HEAD_DIM, "float32")
    assert pages * page_size >= 40 + 1  # room for the context and the step
    assert memory.kv_cache == BLOCKS * pages * 2 * KV_HEADS * page_size * HEAD_DIM * 4


FACTORY = """from relaytrace.zoo.mlc_llama import llama


def make():
    return llama(layers=2)
"""


def _csv(path):
    import csv

    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_the_cli_profiles_a_decode_of_an_mlc_style_llm(tmp_path, capsys):
    """The CLI serves the decode (the prefill it serves alike: the API's test above)."""
    from relaytrace import cli

    (tmp_path / "llm.py").write_text(FACTORY)
    out = tmp_path / "decode"
    assert (
        cli.main(
            [
                "--quiet",
                "profile",
                f"{tmp_path / 'llm.py'}:make",
                "--entry",
                "decode",
                "--context",
                "24",
                "--repeat",
                "2",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "time per output token at context 24" in printed and "KV cache made by create_paged_kv_cache" in printed
    attention = {row["name"]: row for row in _csv(out / "kernels.csv")}["batch_decode_paged_kv_cpu"]
    assert attention["layers"].split(" ") == ["model.layers.0.self_attn", "model.layers.1.self_attn"]
    assert attention["verification"] == "verified" and float(attention["duration_us"]) > 0
    layers = {row["layer"]: row for row in _csv(out / "layers.csv")}
    assert float(layers["model.layers.1.self_attn"]["time_us"]) > 0
    flops, moved = cache_by_hand(1, 24)  # the cache's kernels are the attention layer's work too
    assert float(layers["model.layers.1.self_attn"]["flops"]) == flops
    assert float(layers["model.layers.1.self_attn"]["bytes"]) >= moved


TVMSCRIPT = """import tvm
from tvm.script import ir as I, relax as R


@I.ir_module
class Mod:
    @R.function
    def main(x: R.Tensor((4, 8), "float32"), w: R.Tensor((8, 8), "float32")):
        with R.dataflow():
            y = R.matmul(x, w)
            z = R.nn.relu(y)
            R.output(z)
        return z


def make():
    return Mod
"""


def test_the_cli_takes_a_factory_that_returns_a_tvmscript_module(tmp_path):
    from relaytrace import cli

    (tmp_path / "script.py").write_text(TVMSCRIPT)
    assert (
        cli.main(
            ["--quiet", "profile", f"{tmp_path / 'script.py'}:make", "--repeat", "1", "--out", str(tmp_path / "out")]
        )
        == 0
    )
    kernels = _csv(tmp_path / "out" / "kernels.csv")
    assert [sorted(row["layers"].split(" ")) for row in kernels] == [["y", "z"]]  # matmul and relu, one kernel


def test_an_entry_with_packed_parameters_takes_them_as_one_list_and_says_so_when_not(built):
    from relaytrace.errors import RelaytraceError
    from relaytrace.frontends.loader import load

    executable, lineage = built
    module, spec = llama(layers=BLOCKS)
    inputs = load(module, spec, entry="embed", shapes=[("input_ids", (7,), None)], with_inputs=True).inputs
    assert len(inputs) == 2 and len(inputs[1]) == 1 + 6 * BLOCKS + 2  # the ids, and every weight in one list
    prof = relaytrace.profile(executable, lineage, list(inputs), entry="embed", repeat=1)
    assert prof.inputs[0] == ("input_ids", (7,), "int32") and len(prof.inputs) == 1 + len(inputs[1])
    with pytest.raises(
        RelaytraceError,
        match=r"takes 2 input\(s\) \(input_ids: a tensor, packed_params: a tuple of "
        r"15 tensors\), got 1",
    ):
        relaytrace.profile(executable, lineage, [inputs[0]], entry="embed", repeat=1)
    with pytest.raises(RelaytraceError, match="packed_params is a tuple of 15 tensors: give it as a list of 15"):
        relaytrace.profile(executable, lineage, [inputs[0], inputs[1][:3]], entry="embed", repeat=1)
    with pytest.raises(UsageError, match="profiled as served"):
        relaytrace.profile(executable, lineage, list(inputs), entry="decode", repeat=1)


def test_query_says_which_builtins_of_a_layer_run_the_kv_cache_kernels(built, tmp_path):
    from relaytrace.commands.query import cache_builtins

    _, lineage = built
    assert cache_builtins(lineage, "model.layers.1.self_attn") == [
        f"{entry}:vm.builtin.attention_kv_cache_attention_with_fused_qkv" for entry in ("decode", "prefill")
    ]
    assert cache_builtins(lineage, "model.layers.1.mlp") == []


def test_plain_parameters_are_each_a_tensor_parameter_and_decode_is_served_the_same():
    executable, lineage = relaytrace.build(from_nn(*llama(layers=BLOCKS, param_mode="plain"), name="llama"), "llvm")
    params = lineage.build.params["decode"]
    assert [p.kind for p in params[:2]] == [ParamKind.TENSOR, ParamKind.OBJECT]
    assert len(params) == 2 + 1 + 6 * BLOCKS + 2 and {p.kind for p in params[2:]} == {ParamKind.TENSOR}
    report = make_report(lineage, relaytrace.profile(executable, lineage, [], entry="decode", repeat=1))
    decode = _role_kernel(lineage, PAGED_DECODE)
    billed = {s.layer for s in report.shares if s.key.kernel == decode and s.status == "verified"}
    assert billed == {f"model.layers.{i}.self_attn" for i in range(BLOCKS)}


def test_an_llm_with_its_matmuls_dispatched_to_a_blas_codegen_is_verified_and_served():
    """MLC's form of BLAS dispatch (issue 43): the Llama's Linears partitioned with TVM's
    cuBLAS patterns, unmerged, compiled by a codegen registered as relax.ext.cublas."""
    from .fixtures.offload import offload_pipeline, register_codegen

    register_codegen()
    executable, lineage = relaytrace.build(
        from_nn(*llama(layers=BLOCKS), name="llama"), "llvm", pipeline=offload_pipeline(merge=False)
    )
    assert lineage.verification.ok and lineage.coverage().complete, lineage.verification.summary()
    linears = {
        f"model.layers.{i}.{name}"
        for i in range(BLOCKS)
        for name in ("self_attn.qkv_proj", "self_attn.o_proj", "mlp.gate_up_proj", "mlp.down_proj")
    }
    for entry in ("prefill", "decode"):
        offloaded = {lineage.origins[s.anchor].layer for s in lineage.call_sites if s.library and s.function == entry}
        assert offloaded == linears | {"lm_head"}
    report = make_report(lineage, relaytrace.profile(executable, lineage, [], entry="decode", repeat=1))
    billed = {s.layer for s in report.shares if s.key.kernel == _role_kernel(lineage, PAGED_DECODE)}
    assert billed == {f"model.layers.{i}.self_attn" for i in range(BLOCKS)}
    assert report.categories.library_us > 0
    assert sum(r.us for r in report.layers) == pytest.approx(report.profile.kernel_us)


def test_every_block_of_every_kernel_and_of_the_kv_cache_kernels_is_mapped_and_verified(built):
    from tests.test_code import assert_every_block_mapped_and_verified

    _, lineage = built
    assert_every_block_mapped_and_verified(lineage)
    cache = lineage.build.kv_cache
    assert cache is not None and set(cache.kernels) <= set(lineage.code.kernels)
    q_proj = next(o.layer for o in lineage.origins.values() if o.layer.endswith("qkv_proj"))
    (site, *_) = lineage.code_of(q_proj).sites
    assert site.line and site.blocks


def test_a_buffer_read_to_index_a_written_region_is_read_not_written(built):
    """The KV cache's append writes its pages at the slots its position map names, and
    its ragged prefill writes its output rows at offsets its ``q_indptr`` gives: the
    map and the offsets are read (they are the kernel's inputs), not written, and no
    output of the kernel."""
    from relaytrace.model.entry import APPEND, RAGGED_PREFILL, kernel_role

    _, lineage = built
    cache = lineage.build.kv_cache
    kernels = {kernel_role(cache, k): lineage.code.kernels[k] for k in cache.kernels}
    append, prefill = kernels[APPEND], kernels[RAGGED_PREFILL]
    assert {w for b in append.blocks for w in b.writes} == {"pages"} and append.outputs == ("pages",)
    assert all("position_map" in b.reads for b in append.blocks)
    assert set(prefill.outputs) == {"output", "lse"}
    assert "q_indptr" in prefill.blocks[0].reads


def test_an_attention_layers_code_holds_the_kv_cache_kernels_its_builtin_runs(built):
    from relaytrace.model.entry import PAGED_DECODE, RAGGED_PREFILL, kernel_role

    _, lineage = built
    cache = lineage.build.kv_cache
    attention = "model.layers.1.self_attn"
    runs = [s for s in lineage.code_of(attention).sites if s.kernel in cache.kernels]
    roles = {f: {kernel_role(cache, s.kernel) for s in runs if s.function == f} for f in ("prefill", "decode")}
    assert RAGGED_PREFILL in roles["prefill"] and PAGED_DECODE not in roles["prefill"]
    assert PAGED_DECODE in roles["decode"] and RAGGED_PREFILL not in roles["decode"]
    for site in runs:  # the builtin's own line, every block of the kernel, verified
        line = lineage.code.functions[site.function].text.splitlines()[site.line - 1]
        assert "attention_kv_cache" in line
        assert site.blocks == tuple(range(len(lineage.code.kernels[site.kernel].blocks)))
        assert all(c.status == "verified" for c in site.checks)


def test_a_builtins_calls_are_numbered_per_entry_in_run_order_as_kernel_calls_are(built):
    """``query --history`` names the attention builtin each layer's op runs in as the
    n-th call of that builtin in its entry (layer 1's is the second: ``decode:...#1``),
    not by its position among every site of every entry; the code view's KV-cache runs
    carry the same label."""
    from relaytrace.commands.query import histories
    from relaytrace.model.entry import runs_attention

    _, lineage = built
    for i in range(BLOCKS):
        labels = [
            label
            for h in histories(lineage, f"model.layers.{i}.self_attn")
            for label in h["builtins"]
            if runs_attention(label.split(":", 1)[1].rpartition("#")[0])
        ]
        name = "vm.builtin.attention_kv_cache_attention_with_fused_qkv"
        assert sorted(labels) == [f"decode:{name}#{i}", f"prefill:{name}#{i}"]
        runs = {s.label.split(" ")[0] for s in lineage.code_of(f"model.layers.{i}.self_attn").sites if " " in s.label}
        assert runs == set(labels)
