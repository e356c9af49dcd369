// One FFI call per Relax function instead of one per attribute: the tracker reads each
// function after every pass, and from Python each field read costs a call and a wrapper.
// The apache-tvm wheel ships no Relax headers, so fields are read by reflection, by the
// names Python sees. The layout is described, and decoded, in digest.py, which also
// holds a Python writer of the same layout; the tests compare the two.
#include <tvm/ffi/tvm_ffi.h>
#include <tvm/ffi/container/array.h>
#include <tvm/ffi/dtype.h>
#include <tvm/ffi/reflection/accessor.h>

#include <cstring>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

using namespace tvm::ffi;  // NOLINT

namespace {

enum Kind : int64_t { kOther = 0, kVar, kConst, kTuple, kItem, kCall, kOp, kGlobal, kExtern };
constexpr int64_t kField = 16;  // an argument atom that is a field of a tuple argument
constexpr int64_t kNotAsked = -2, kSymbolic = -1;
constexpr char kDim = '\x1f', kDtype = '\x1e', kTensor = '\x1d';

struct TypeRef {
  int32_t index;
  int32_t depth;
};

// A type this reader depends on; a TVM without it gets an error naming it (and the
// Python reader takes over) rather than a digest that silently misreads.
TypeRef Lookup(const char* key, bool required = true) {
  TVMFFIByteArray bytes{key, std::char_traits<char>::length(key)};
  int32_t index = -1;
  if (TVMFFITypeKeyToIndex(&bytes, &index) != 0 || index < 0) {
    TVM_FFI_CHECK(!required, RuntimeError) << "relaytrace's IR reader needs the TVM type " << key;
    return TypeRef{-1, -1};
  }
  return TypeRef{index, TVMFFIGetTypeInfo(index)->type_depth};
}

// isinstance by the runtime type table, since the Relax classes are not compiled in.
bool IsA(const Object* obj, const TypeRef& type) {
  if (type.index < 0) return false;
  int32_t index = obj->type_index();
  if (index == type.index) return true;
  const TVMFFITypeInfo* info = TVMFFIGetTypeInfo(index);
  return info->type_depth > type.depth && info->type_ancestors[type.depth]->type_index == type.index;
}

struct Schema {
  TypeRef var = Lookup("ir.Var"), constant = Lookup("ir.Constant", false),
          generic_const = Lookup("ir.GenericConst", false), tuple = Lookup("ir.Tuple"),
          item = Lookup("ir.TupleGetItem"), call = Lookup("ir.Call"), op = Lookup("ir.Op"),
          global = Lookup("ir.GlobalVar"), extern_func = Lookup("relax.expr.ExternFunc"),
          string_imm = Lookup("ir.StringImm"), seq = Lookup("relax.expr.SeqExpr"),
          tensor_type = Lookup("relax.TensorType"), tuple_type = Lookup("ir.TupleType"),
          prim_type = Lookup("ir.PrimType"), shape_expr = Lookup("relax.expr.ShapeExpr"),
          int_imm = Lookup("ir.IntImm");
  reflection::FieldGetter params{"relax.expr.Function", "params"},
      body{"relax.expr.Function", "body"}, blocks{"relax.expr.SeqExpr", "blocks"},
      seq_body{"relax.expr.SeqExpr", "body"}, bindings{"relax.expr.BindingBlock", "bindings"},
      binding_var{"relax.expr.Binding", "var"}, binding_value{"relax.expr.VarBinding", "value"},
      var_name{"ir.Var", "name"}, ty{"ir.Expr", "ty"}, call_op{"ir.Call", "op"},
      call_args{"ir.Call", "args"}, fields{"ir.Tuple", "fields"},
      tuple_value{"ir.TupleGetItem", "tuple_value"}, item_index{"ir.TupleGetItem", "index"},
      op_name{"ir.Op", "name"}, name_hint{"ir.GlobalVar", "name_hint"},
      global_symbol{"relax.expr.ExternFunc", "global_symbol"}, string_value{"ir.StringImm", "value"},
      tuple_fields{"ir.TupleType", "fields"}, tensor_dtype{"relax.TensorType", "dtype"},
      tensor_shape{"relax.TensorType", "shape"}, prim_dtype{"ir.PrimType", "dtype"},
      shape_values{"relax.expr.ShapeExpr", "values"}, int_value{"ir.IntImm", "value"};
};

int64_t Handle(const Object* obj) { return reinterpret_cast<int64_t>(obj); }

std::unordered_set<std::string> Split(const std::string& joined) {
  std::unordered_set<std::string> out;
  for (size_t start = 0, end; start < joined.size(); start = end + 1) {
    end = joined.find('\0', start);
    if (end == std::string::npos) end = joined.size();
    out.emplace(joined.substr(start, end - start));
  }
  return out;
}

class Writer {
 public:
  Writer(const Schema& s, bool types, std::unordered_set<std::string> tir_ops,
         std::unordered_set<std::string> packed_ops)
      : s_(s), types_(types), tir_ops_(std::move(tir_ops)), packed_ops_(std::move(packed_ops)) {}

  std::vector<int64_t> out;
  std::string strings;

  int64_t Str(const std::string& text) {
    auto found = string_index_.find(text);
    if (found != string_index_.end()) return found->second;
    int64_t index = static_cast<int64_t>(string_index_.size());
    string_index_.emplace(text, index);
    strings += text;
    strings.push_back('\0');
    string_list_.push_back(text);
    return index;
  }

  // A type as text: per tensor its dtype and dims, split by ASCII separators as in
  // digest.py; interned. What origins need of a type, cheaper than a structural hash.
  int64_t Type(const Object* expr) {
    if (!types_) return kNotAsked;
    auto found = types_of_.find(expr);  // a var is written once bound, then once per use
    if (found != types_of_.end()) return found->second;
    Optional<ObjectRef> ty = s_.ty(expr).cast<Optional<ObjectRef>>();
    std::string text;
    int64_t type = ty.has_value() && !TypeText(ty.value().get(), &text) ? kSymbolic : Str(text);
    types_of_.emplace(expr, type);
    return type;
  }

  // One expression, prefix order: kind, handle, then the kind's payload.
  void Expr(const Object* e) {
    switch (ClassOf(e)) {
      case kVarClass:
        Put(kVar, Handle(e), Type(e));
        break;
      case kConstClass:
        Put(kConst, Handle(e), Type(e));
        break;
      case kTupleClass: {
        Array<ObjectRef> fields = s_.fields(e).cast<Array<ObjectRef>>();
        Put(kTuple, Handle(e), static_cast<int64_t>(fields.size()));
        for (const ObjectRef& f : fields) Expr(f.get());
        break;
      }
      case kItemClass:
        Put(kItem, Handle(e), s_.item_index(e).cast<int64_t>());
        Expr(s_.tuple_value(e).cast<ObjectRef>().get());
        break;
      case kCallClass: {
        Array<ObjectRef> args = s_.call_args(e).cast<Array<ObjectRef>>();
        Put(kCall, Handle(e), static_cast<int64_t>(args.size()));
        Expr(s_.call_op(e).cast<ObjectRef>().get());
        for (const ObjectRef& a : args) Expr(a.get());
        break;
      }
      default:
        Callee(e);
    }
  }

  // The call record of the value written at `at`, as digest.call_record reads it:
  // callee name, GlobalVar handle (0: none), the atom count and the arguments as
  // atoms (kind, handle, type), a tuple argument followed by its fields marked kField. call_tir(F, (a, b))
  // and call_packed("f", a, b) are unwrapped to F(a, b) and f(a, b). -1: not a call.
  int64_t CallRecord(size_t at) {
    if (out[at] != kCall) return -1;
    size_t callee = at + 3;
    std::vector<size_t>& args = args_;
    args.clear();
    for (size_t p = Skip(callee), i = 0; i < static_cast<size_t>(out[at + 2]); ++i, p = Skip(p)) {
      args.push_back(p);
    }
    int64_t name = NameOf(callee), global = out[callee] == kGlobal ? out[callee + 1] : 0;
    std::string op = out[callee] == kOp ? string_list_[name] : std::string();
    if (!args.empty() && tir_ops_.count(op)) {
      name = NameOf(args[0]);
      global = out[args[0]] == kGlobal ? out[args[0] + 1] : 0;
      std::vector<size_t>& inner = inner_;
      inner.clear();
      if (args.size() > 1 && out[args[1]] == kTuple) {
        for (size_t p = args[1] + 3, i = 0; i < static_cast<size_t>(out[args[1] + 2]); ++i, p = Skip(p)) {
          inner.push_back(p);
        }
      } else if (args.size() > 1) {
        inner.push_back(args[1]);
      }
      args.swap(inner);
    } else if (!args.empty() && packed_ops_.count(op)) {
      name = NameOf(args[0]);
      global = 0;
      args.erase(args.begin());
    }
    int64_t record = static_cast<int64_t>(out.size());
    out.push_back(name);
    out.push_back(global);
    size_t count_at = out.size();
    out.push_back(0);
    for (size_t arg : args) {
      Atom(arg, 0);
      if (out[arg] == kTuple) {
        for (size_t p = arg + 3, i = 0; i < static_cast<size_t>(out[arg + 2]); ++i, p = Skip(p)) Atom(p, kField);
      }
    }
    out[count_at] = static_cast<int64_t>((out.size() - count_at - 1) / 3);
    return record;
  }

 private:
  bool TypeText(const Object* ty, std::string* text) {
    if (IsA(ty, s_.tuple_type)) {
      for (const ObjectRef& f : s_.tuple_fields(ty).cast<Array<ObjectRef>>()) {
        if (!TypeText(f.get(), text)) return false;
      }
      return true;
    }
    if (!IsA(ty, s_.tensor_type)) return true;  // no tensor in it
    ObjectRef dtype = s_.tensor_dtype(ty).cast<ObjectRef>();
    if (!IsA(dtype.get(), s_.prim_type)) return false;
    if (!text->empty()) text->push_back(kTensor);
    *text += DLDataTypeToString(s_.prim_dtype(dtype).cast<DLDataType>());
    text->push_back(kDtype);
    Optional<ObjectRef> shape = s_.tensor_shape(ty).cast<Optional<ObjectRef>>();
    if (!shape.has_value() || !IsA(shape.value().get(), s_.shape_expr)) return true;
    bool first = true;
    for (const ObjectRef& dim : s_.shape_values(shape.value()).cast<Array<ObjectRef>>()) {
      if (!IsA(dim.get(), s_.int_imm)) return false;
      if (!first) text->push_back(kDim);
      *text += std::to_string(s_.int_value(dim).cast<int64_t>());
      first = false;
    }
    return true;
  }

  // What an object is, by its runtime type index: classified once per type, since
  // the ancestor walk behind IsA would otherwise run for every expression.
  enum Class : int8_t {
    kUnknown = 0, kVarClass, kConstClass, kTupleClass, kItemClass, kCallClass, kOpClass,
    kGlobalClass, kExternFuncClass, kStringImmClass, kOtherClass
  };

  Class ClassOf(const Object* e) {
    size_t index = static_cast<size_t>(e->type_index());
    if (index >= classes_.size()) classes_.resize(index + 1, kUnknown);
    if (classes_[index] == kUnknown) {
      classes_[index] = IsA(e, s_.var)                                        ? kVarClass
                        : IsA(e, s_.constant) || IsA(e, s_.generic_const)     ? kConstClass
                        : IsA(e, s_.tuple)                                    ? kTupleClass
                        : IsA(e, s_.item)                                     ? kItemClass
                        : IsA(e, s_.call)                                     ? kCallClass
                        : IsA(e, s_.op)                                       ? kOpClass
                        : IsA(e, s_.global)                                   ? kGlobalClass
                        : IsA(e, s_.extern_func)                              ? kExternFuncClass
                        : IsA(e, s_.string_imm)                               ? kStringImmClass
                                                                              : kOtherClass;
    }
    return classes_[index];
  }

  // Ops, functions and symbols recur at many call sites: each is named once per call.
  void Callee(const Object* e) {
    auto found = callees_.find(e);
    if (found == callees_.end()) {
      std::pair<int64_t, int64_t> named;
      switch (ClassOf(e)) {
        case kOpClass:
          named = {kOp, Str(s_.op_name(e).cast<String>())};
          break;
        case kGlobalClass:
          named = {kGlobal, Str(s_.name_hint(e).cast<String>())};
          break;
        case kExternFuncClass:
          named = {kExtern, Str(s_.global_symbol(e).cast<String>())};
          break;
        case kStringImmClass:
          named = {kExtern, Str(s_.string_value(e).cast<String>())};
          break;
        default: {
          std::string key = e->GetTypeKey();
          named = {kOther, Str(key.substr(key.rfind('.') + 1))};
        }
      }
      found = callees_.emplace(e, named).first;
    }
    Put(found->second.first, Handle(e), found->second.second);
  }

  // Where the expression after the one at `at` starts.
  size_t Skip(size_t at) const {
    int64_t kind = out[at], payload = out[at + 2];
    at += 3;
    if (kind == kItem) return Skip(at);
    if (kind == kCall) at = Skip(at);
    if (kind == kTuple || kind == kCall) {
      for (int64_t i = 0; i < payload; ++i) at = Skip(at);
    }
    return at;
  }

  // A callee's name; an expression that is not a callee goes by its kind.
  int64_t NameOf(size_t at) {
    static const char* kinds[] = {"", "Var", "Constant", "Tuple", "TupleGetItem", "Call"};
    return out[at] >= kOp || out[at] == kOther ? out[at + 2] : Str(kinds[out[at]]);
  }

  void Atom(size_t at, int64_t flag) {
    Put(out[at] + flag, out[at + 1], out[at] == kVar || out[at] == kConst ? out[at + 2] : 0);
  }

  void Put(int64_t kind, int64_t handle, int64_t payload) {
    out.push_back(kind);
    out.push_back(handle);
    out.push_back(payload);
  }

  const Schema& s_;
  bool types_;
  std::unordered_set<std::string> tir_ops_, packed_ops_;
  std::unordered_map<std::string, int64_t> string_index_;
  std::vector<std::string> string_list_;
  std::unordered_map<const Object*, int64_t> types_of_;
  std::unordered_map<const Object*, std::pair<int64_t, int64_t>> callees_;
  std::vector<Class> classes_;
  std::vector<size_t> args_, inner_;  // CallRecord's scratch, kept to spare an allocation per call
};

// The bindings of a function's body, in order, and the body's result (null without one).
const Object* Bindings(const Schema& s, const ObjectRef& func, std::vector<const Object*>* out) {
  ObjectRef body = s.body(func).cast<ObjectRef>();
  if (!IsA(body.get(), s.seq)) return nullptr;
  for (const ObjectRef& block : s.blocks(body).cast<Array<ObjectRef>>()) {
    for (const ObjectRef& b : s.bindings(block).cast<Array<ObjectRef>>()) out->push_back(b.get());
  }
  return s.seq_body(body).cast<ObjectRef>().get();
}

}  // namespace

// [n_params, n_bindings, output offset | -1], params as (handle, name, type), bindings
// as six columns (var and value handles, name, var type, value offset, call record
// offset), then the stream: each value followed by its call record. Returned with
// the string table. Of a binding object that `old` also has, only its var's handle is
// written (the rest zeros, offsets -1): the tracker knows the rest.
Array<Any> digest(ObjectRef func, Optional<ObjectRef> old, bool types, String tir_ops, String packed_ops) {
  static const Schema schema;
  const Schema& s = schema;
  Writer w(s, types, Split(tir_ops), Split(packed_ops));
  Array<ObjectRef> params = s.params(func).cast<Array<ObjectRef>>();
  std::vector<const Object*> bindings;
  const Object* output = Bindings(s, func, &bindings);
  std::unordered_set<const Object*> known;
  if (old.has_value()) {
    std::vector<const Object*> old_bindings;
    Bindings(s, old.value(), &old_bindings);
    known.insert(old_bindings.begin(), old_bindings.end());
  }
  size_t n = bindings.size();
  std::vector<int64_t> head = {static_cast<int64_t>(params.size()), static_cast<int64_t>(n), -1};
  for (const ObjectRef& p : params) {
    head.push_back(Handle(p.get()));
    head.push_back(w.Str(s.var_name(p).cast<String>()));
    head.push_back(w.Type(p.get()));
  }
  std::vector<int64_t> cols(6 * n);
  for (size_t i = 0; i < n; ++i) {
    ObjectRef var = s.binding_var(bindings[i]).cast<ObjectRef>();
    cols[i] = Handle(var.get());
    if (known.count(bindings[i])) {
      cols[2 * n + i] = -1;
      cols[3 * n + i] = kNotAsked;
      cols[4 * n + i] = -1;
      cols[5 * n + i] = -1;
      continue;
    }
    ObjectRef value = s.binding_value(bindings[i]).cast<ObjectRef>();
    cols[n + i] = Handle(value.get());
    cols[2 * n + i] = w.Str(s.var_name(var).cast<String>());
    cols[3 * n + i] = w.Type(var.get());
    size_t at = w.out.size();
    cols[4 * n + i] = static_cast<int64_t>(at);
    w.Expr(value.get());
    cols[5 * n + i] = w.CallRecord(at);
  }
  if (output != nullptr) {
    head[2] = static_cast<int64_t>(w.out.size());
    w.Expr(output);
  }
  std::string bytes((head.size() + cols.size() + w.out.size()) * sizeof(int64_t), '\0');
  char* at = bytes.data();
  for (const std::vector<int64_t>* part : {&head, &cols, &w.out}) {
    std::memcpy(at, part->data(), part->size() * sizeof(int64_t));
    at += part->size() * sizeof(int64_t);
  }
  return Array<Any>{Bytes(std::move(bytes)), Bytes(std::move(w.strings))};
}
