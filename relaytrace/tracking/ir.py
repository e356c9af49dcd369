"""Read-only helpers over Relax IR, for the frontends and the reader.

TVM 0.27 moved the Relax expression classes into ``tvm.ir.expr``; keeping every
isinstance test here means one place to adapt when TVM moves them again.
"""

from __future__ import annotations

import tvm_ffi
from tvm import relax, tirx
from tvm.ir import StringImm
from tvm.ir import expr as _expr
from tvm.ir.op import Op

CONSTANT_TYPES = tuple(t for t in (getattr(_expr, "Constant", None), getattr(_expr, "GenericConst", None)) if t)

CALL_TIR_OPS = frozenset(
    {
        "relax.call_tir",
        "relax.call_tir_inplace",
        "relax.call_tir_with_grad",
        "relax.call_dps_packed",
    }
)
PACKED_OPS = frozenset({"relax.call_packed", "relax.call_builtin_with_ctx", "relax.call_pure_packed"})


_ARRAY_SIZE = tvm_ffi.get_global_func("ffi.ArraySize")
_ARRAY_ITEM = tvm_ffi.get_global_func("ffi.ArrayGetItem")


def items(array) -> list:
    """The elements of an FFI Array. Slicing an Array goes through Python helpers per
    element; on the per-binding path that costs more than the tracking itself."""
    return [_ARRAY_ITEM(array, i) for i in range(_ARRAY_SIZE(array))]


def function_map(mod) -> dict[str, relax.Function]:
    """The Relax functions of a module by name, fused groups included, as the module
    holds them now: functions never change, but a Python pass may change the module
    object in place."""
    return {gv.name_hint: func for gv, func in mod.functions.items() if isinstance(func, relax.Function)}


def prim_func_map(mod) -> dict:
    """name -> PrimFunc of every function of ``mod`` that is no Relax function."""
    return {gv.name_hint: f for gv, f in mod.functions.items() if not isinstance(f, relax.Function)}


def model_functions(functions: dict[str, relax.Function]) -> dict[str, relax.Function]:
    """The functions whose bindings carry origins: groups (fused or offloaded,
    ``is_group``) are followed through their call sites."""
    return {name: func for name, func in functions.items() if not is_group(func)}


def entry_functions(functions: dict[str, relax.Function]) -> list[str]:
    """The Relax functions a VM can call by name (those with a ``global_symbol``):
    ``main`` first, then by name; private functions run only when another calls them.
    A module built by hand whose functions have no ``global_symbol`` at all (the build
    gives every function one): all of its functions."""
    model = model_functions(functions)
    names = [name for name, func in model.items() if func.attrs is not None and "global_symbol" in func.attrs]
    return sorted(names or model, key=lambda name: (name != "main", name))


def is_subfunction(functions: dict, callee: str, global_var: int) -> bool:
    """A call of ``callee`` (through a GlobalVar) calls a Relax function of the module
    that is not a group (``is_group``): the VM runs it, its ops are at its own call sites."""
    func = functions.get(callee) if global_var else None
    return func is not None and not is_group(func)


def lookup(mod, gv):
    """The function a GlobalVar (or a name) names in this module, or None."""
    try:
        return mod[gv]
    except Exception:  # TVM raises InternalError for a GlobalVar the module lacks
        return None


def is_primitive(func) -> bool:
    """Whether a Relax function is a fused group (its ``Primitive`` attribute is 1)."""
    attrs = func.attrs
    return attrs is not None and "Primitive" in attrs and int(attrs["Primitive"]) == 1


def is_offloaded(func) -> bool:
    """Whether a Relax function is a group handed to an external codegen (its
    ``Codegen`` attribute, as ``FuseOpsByPattern(annotate_codegen=True)`` and
    ``MergeCompositeFunctions`` make it): ``RunCodegen`` compiles it into an external
    module and replaces each call of it with a ``call_dps_packed`` of its symbol."""
    attrs = func.attrs
    return attrs is not None and "Codegen" in attrs


def is_group(func) -> bool:
    """A fused group (``is_primitive``) or an offloaded one (``is_offloaded``): a
    function whose calls are call sites, its body what each of them runs."""
    return is_primitive(func) or is_offloaded(func)


def codegen_of(func) -> str:
    """The ``Codegen`` attribute of an offloaded group (``cublas``)."""
    return str(func.attrs["Codegen"])


def pattern_of(func) -> str:
    """The ``Composite`` attribute of a composite function (the pattern that made it,
    ``cublas.matmul_transposed_bias_relu``), "" for any other function."""
    attrs = func.attrs
    return str(attrs["Composite"]) if attrs is not None and "Composite" in attrs else ""


def called_function(call, bindings_before) -> relax.Function | None:
    """The Relax function a call calls in place: a function literal, or a var one of
    ``bindings_before`` (the bindings of the same body) binds to one, as an offloaded
    group calls its composite functions; None for any other callee."""
    op = call.op
    if isinstance(op, relax.Function):
        return op
    if isinstance(op, relax.Var):
        return next(
            (
                b.value
                for b in bindings_before
                if b is not None and b.var.same_as(op) and isinstance(b.value, relax.Function)
            ),
            None,
        )
    return None


def bindings(func) -> list:
    """The bindings of a function's body, in order."""
    body = func.body
    out: list = []
    if isinstance(body, relax.SeqExpr):
        for block in items(body.blocks):
            out += items(block.bindings)
    return out


def function_output(func):
    """The result of a function's body; None when the body is no ``SeqExpr``."""
    body = func.body
    return body.body if isinstance(body, relax.SeqExpr) else None


_KINDS: dict[type, str] = {}


def kind(expr) -> str:
    """ "var", "const", "tuple", "item", "call" or "other"; memoised by type, since
    isinstance against TVM's classes is slow on the per-binding path."""
    t = type(expr)
    found = _KINDS.get(t)
    if found is None:
        found = _KINDS[t] = (
            "var"
            if isinstance(expr, _expr.Var)
            else "const"
            if isinstance(expr, CONSTANT_TYPES)
            else "tuple"
            if isinstance(expr, _expr.Tuple)
            else "item"
            if isinstance(expr, _expr.TupleGetItem)
            else "call"
            if isinstance(expr, _expr.Call)
            else "other"
        )
    return found


def is_var(expr) -> bool:
    """Whether ``expr`` is a Relax Var."""
    return kind(expr) == "var"


def is_tuple(expr) -> bool:
    """Whether ``expr`` is a Relax Tuple."""
    return kind(expr) == "tuple"


def is_tuple_get_item(expr) -> bool:
    """Whether ``expr`` is a Relax TupleGetItem."""
    return kind(expr) == "item"


def is_call(expr) -> bool:
    """Whether ``expr`` is a Relax Call."""
    return kind(expr) == "call"


def callee_category(expr) -> tuple[str, str]:
    """("op" | "global" | "extern" | "other", name) of a call's callee; what is no
    callee goes by its type's name."""
    if isinstance(expr, Op):
        return "op", expr.name
    if isinstance(expr, relax.GlobalVar):
        return "global", expr.name_hint
    if isinstance(expr, relax.ExternFunc):
        return "extern", str(expr.global_symbol)
    if isinstance(expr, StringImm):
        return "extern", str(expr.value)
    return "other", type(expr).__tvm_ffi_type_info__.type_key.rsplit(".", 1)[-1]


UNKNOWN_DIM, ANY_RANK = "?", "..."  # as ``model.shapes`` reads them


def tensor_types(ty) -> list[tuple[tuple, str]]:
    """(shape, dtype) of every tensor in a (possibly tuple) type. A tensor whose shape
    the type leaves open has ``UNKNOWN_DIM`` per dim, or ``(ANY_RANK,)`` when even its
    rank is open."""
    if isinstance(ty, relax.TensorType):
        shape = ty.shape
        if shape is None or not hasattr(shape, "values"):
            ndim = int(ty.ndim)
            return [((UNKNOWN_DIM,) * ndim if ndim >= 0 else (ANY_RANK,), str(ty.dtype))]
        return [(tuple(dim(v) for v in items(shape.values)), str(ty.dtype))]
    if isinstance(ty, relax.TupleType):
        out: list[tuple[tuple, str]] = []
        for field in ty.fields:
            out.extend(tensor_types(field))
        return out
    return []


def buffer_types(prim_func) -> tuple[tuple[tuple, str], ...]:
    """(shape, dtype) of each buffer a PrimFunc takes, in parameter order (a scalar
    parameter, a symbolic size, is none): what a call of it passes, as
    ``tensor_types`` reads a call's arguments."""
    return tuple(
        (tuple(dim(v) for v in items(p.ty.shape)), str(p.ty.dtype))
        for p in items(prim_func.params)
        if isinstance(p.ty, tirx.BufferType)
    )


def dim(value):
    """A dimension as an int when it is one, else as printed (a symbolic dim)."""
    try:
        return int(value)
    except (TypeError, ValueError):
        return str(value)


def expr_type(expr):
    """The type an expression carries (``ty``); None when it has none."""
    return getattr(expr, "ty", None)


def built_target(modules) -> str:
    """The target a build compiled for, as the ``target`` attribute of its kernels
    (BindTarget puts it there) in the last of ``modules`` that has one; "" if none."""
    for mod in reversed(modules):
        for func in mod.functions.values():
            if isinstance(func, tirx.PrimFunc) and func.attrs is not None and "target" in func.attrs:
                return str(func.attrs["target"])
    return ""
