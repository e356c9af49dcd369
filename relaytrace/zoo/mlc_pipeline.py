"""A Relax pipeline written the way MLC-LLM writes its own (``mlc_llm.compiler_pass``),
so that relaytrace is tried on kernels made by passes other than LegalizeOps, FuseOps
and FuseTIR. The code is our own; its passes do what MLC's of the same name do:

- ``FuseTransposeMatmul``: ``matmul(x, permute_dims(w))`` (a ``nn.Linear``) grouped by
  ``FuseOpsByPattern`` into a composite function, then each call of it rewritten into a
  ``call_tir`` of a new PrimFunc ``NT_matmul`` made with ``BlockBuilder.call_te``;
- after FuseTIR, ``FuseDequantizeMatmulEwise``: a ``dequantize*`` kernel feeding a
  ``matmul`` / ``NT_matmul`` kernel (and up to two more arguments, an element-wise
  epilogue's) grouped by ``FuseOpsByPattern`` and merged by ``FuseTIR`` into one
  PrimFunc ``fused_dequantize*_NT_matmul*``;
- ``CleanUpTIRAttrs``: PrimFuncs rewritten without the named attributes (new objects,
  the same names, changed in the module in place);
- DLight's schedules (``ApplyDefaultSchedule``, in place): the CPU ``GEMV`` for llvm,
  the GPU ``Matmul``, ``GEMV``, ``Reduction``, ``GeneralReduction`` and ``Fallback`` for
  any other target, where a kernel of reshapes scheduled into one block is then a
  reshape ``RewriteDataflowReshape`` turns back into ``R.reshape``;

then TVM's VM lowering. ``pipeline(target)`` returns the pipeline
as a Pass; importing this module registers it as the pipeline ``"mlc_style"`` (the
CLI's ``--pipeline mlc_style``, a ``FILE.py`` that imports it)."""

from __future__ import annotations

import tvm
from tvm import relax, te
from tvm.relax.dpl.pattern import GlobalVarPattern, TuplePattern, is_op, wildcard
from tvm.relax.expr_functor import PyExprMutator, mutator
from tvm.s_tir import dlight

NAME = "mlc_style"
_TRANSPOSE_MATMUL = "mlc_style.transpose_matmul"
_DEQUANTIZE_MATMUL = "mlc_style.dequantize_matmul"


def _nt_matmul(x: te.Tensor, w: te.Tensor, out_dtype: str) -> te.Tensor:
    """``x @ w.T`` for ``x`` (..., k) and ``w`` (n, k), accumulated in ``out_dtype``."""
    k = te.reduce_axis((0, x.shape[-1]), name="k")
    return te.compute(
        (*x.shape[:-1], w.shape[0]),
        lambda *i: te.sum(x[(*i[:-1], k)].astype(out_dtype) * w[i[-1], k].astype(out_dtype), axis=k),
        name="NT_matmul",
    )


def _transpose_matmul_pattern():
    """(pattern, annotations, check) of ``matmul(x, permute_dims(w))`` with ``w`` a
    matrix transposed whole: what ``nn.Linear`` emits."""
    x, w = wildcard(), wildcard()
    transposed = is_op("relax.permute_dims")(w)
    out = is_op("relax.matmul")(x, transposed)

    def check(context) -> bool:
        permute = context.annotated_expr["transposed"]
        weight, data = permute.args[0].ty, context.annotated_expr["x"].ty
        if not isinstance(weight, relax.TensorType) or weight.ndim != 2 or data.ndim < 2:
            return False
        return permute.attrs.axes is None or [int(a) for a in permute.attrs.axes] == [1, 0]

    return out, {"x": x, "w": w, "transposed": transposed, "out": out}, check


@mutator
class _TransposeMatmulToTE(PyExprMutator):
    """Each call of a ``_TRANSPOSE_MATMUL`` composite function rewritten into a
    ``call_tir`` of ``NT_matmul`` on the call's own arguments."""

    def visit_call_(self, call):  # noqa: D102 (a visitor's hook)
        if isinstance(call.op, relax.GlobalVar):
            func = self.builder_.get()[call.op]
            if isinstance(func, relax.Function) and func.attrs is not None:
                if str(func.attrs.get("Composite", "")) == _TRANSPOSE_MATMUL:
                    x, w = _matmul_operands(func, call.args)
                    dtype = func.ret_ty.dtype
                    return self.builder_.call_te(_nt_matmul, x, w, dtype, primfunc_name_hint="NT_matmul")
        return super().visit_call_(call)


def _matmul_operands(func, args):
    """The call arguments a composite ``matmul(x, permute_dims(w))`` takes as ``x`` and
    ``w``; an operand the composite holds itself (a model's weight bound as a constant, as
    a torch import makes it) as it is."""
    by_param = dict(zip(func.params, args))
    made = {b.var: b.value for block in func.body.blocks for b in block.bindings}
    matmul = func.body.body if isinstance(func.body.body, relax.Call) else made[func.body.body]
    permute = made.get(matmul.args[1], matmul.args[1])
    return by_param.get(matmul.args[0], matmul.args[0]), by_param.get(permute.args[0], permute.args[0])


@tvm.transform.module_pass(opt_level=0, name="FuseTransposeMatmul")
class FuseTransposeMatmul:
    """``matmul(x, permute_dims(w))`` -> ``call_tir(NT_matmul, (x, w))``."""

    def transform_module(self, mod, _ctx):  # noqa: D102 (the pass's hook)
        mod = relax.transform.FuseOpsByPattern([(_TRANSPOSE_MATMUL, *_transpose_matmul_pattern())])(mod)
        rewrite = _TransposeMatmulToTE(mod)
        for gv, func in mod.functions_items():
            if isinstance(func, relax.Function):
                rewrite.builder_.update_func(gv, rewrite.visit_expr(func))
        return rewrite.builder_.get()


def _dequantize_matmul_pattern(aux: int, epilogue: int):
    """(pattern, annotations, check) of a ``dequantize*`` kernel whose result a
    ``matmul*`` / ``NT_matmul*`` kernel takes as its second argument; the dequantize
    takes ``aux`` tensors besides the packed weight, the matmul ``epilogue`` besides x."""
    x = wildcard()
    weight = is_op("relax.call_tir")(GlobalVarPattern(), TuplePattern([wildcard() for _ in range(aux + 1)]))
    out = is_op("relax.call_tir")(GlobalVarPattern(), TuplePattern([x, weight, *(wildcard() for _ in range(epilogue))]))

    def check(context) -> bool:
        dequantize, matmul = context.annotated_expr["weight"], context.annotated_expr["out"]
        return str(dequantize.args[0].name_hint).startswith(("dequantize", "fused_dequantize")) and str(
            matmul.args[0].name_hint
        ).startswith(("matmul", "fused_matmul", "NT_matmul", "fused_NT_matmul"))

    return out, {"x": x, "weight": weight, "out": out}, check


@tvm.transform.module_pass(opt_level=0, name="FuseDequantizeMatmulEwise")
class FuseDequantizeMatmulEwise:
    """A dequantize kernel and the matmul kernel that takes its result, merged into one."""

    def transform_module(self, mod, _ctx):  # noqa: D102 (the pass's hook)
        patterns = [
            (_DEQUANTIZE_MATMUL, *_dequantize_matmul_pattern(aux, epilogue))
            for epilogue in (2, 1, 0)
            for aux in (2, 1, 0)
        ]
        return tvm.transform.Sequential([relax.transform.FuseOpsByPattern(patterns), relax.transform.FuseTIR()])(mod)


@tvm.transform.module_pass(opt_level=0, name="CleanUpTIRAttrs")
class CleanUpTIRAttrs:
    """Every PrimFunc rewritten without the attributes ``names``, in the module given."""

    def __init__(self, names: tuple[str, ...] = ("op_pattern",)):
        self.names = names

    def transform_module(self, mod, _ctx):  # noqa: D102 (the pass's hook)
        for gv, func in mod.functions_items():
            if isinstance(func, tvm.tirx.PrimFunc) and func.attrs is not None:
                cleaned = func
                for name in self.names:
                    if name in cleaned.attrs:
                        cleaned = cleaned.without_attr(name)
                if not cleaned.same_as(func):
                    mod[gv] = cleaned
        return mod


def _schedules(target) -> tvm.transform.Pass:
    """DLight's schedules for ``target``, as MLC-LLM's pipeline picks them."""
    if target.kind.name == "llvm":
        return dlight.ApplyDefaultSchedule(dlight.cpu.GEMV())
    gpu = dlight.gpu
    return dlight.ApplyDefaultSchedule(
        gpu.Matmul(), gpu.GEMV(), gpu.Reduction(), gpu.GeneralReduction(), gpu.Fallback()
    )


def pipeline(target=None, gemv: bool = True) -> tvm.transform.Pass:
    """The pipeline for ``target`` (default: the current one, as ``tvm.compile`` enters
    it): MLC-LLM's graph passes, TVM's lowering and fusion, MLC's TIR passes, DLight's
    schedules (unless ``gemv`` is False, for llvm only: LLVM takes minutes over the
    128-lane vectors the CPU GEMV makes of a decode's matmuls, even at the zoo Llama's
    hidden size of 64; a GPU target needs its schedules), TVM's VM lowering."""

    @tvm.transform.module_pass(opt_level=0, name=NAME)
    def run(mod, _ctx):
        chosen = tvm.target.Target.current() if target is None else tvm.target.Target(target)
        with chosen:
            return tvm.transform.Sequential(
                [
                    FuseTransposeMatmul(),
                    relax.backend.DispatchSampling(),
                    relax.backend.DispatchSortScan(),
                    relax.transform.LegalizeOps(),
                    relax.transform.AnnotateTIROpPattern(),
                    relax.transform.FoldConstant(),
                    relax.transform.FuseOps(),
                    relax.transform.FuseTIR(),
                    FuseDequantizeMatmulEwise(),
                    relax.transform.DeadCodeElimination(),
                    CleanUpTIRAttrs(("op_pattern",)),
                    _schedules(chosen) if gemv or chosen.kind.name != "llvm" else tvm.transform.Sequential([]),
                    relax.transform.RewriteDataflowReshape(),
                    relax.transform.ToNonDataflow(),
                    relax.transform.RemovePurityChecking(),
                    relax.transform.CallTIRRewrite(),
                    relax.transform.StaticPlanBlockMemory(),
                    relax.transform.LowerAllocTensor(),
                    relax.transform.KillAfterLastUse(),
                    relax.transform.LowerRuntimeBuiltin(),
                    relax.transform.ComputePrimValue(),
                    relax.transform.VMShapeLower(),
                    relax.transform.AttachGlobalSymbol(),
                ]
            )(mod)

    return run


if NAME not in relax.pipeline.PIPELINE_MAP:
    relax.register_pipeline(NAME)(pipeline)
