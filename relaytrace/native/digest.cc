// One FFI call per Relax function instead of one per attribute: the tracker reads each
// function after every pass, and from Python each field read costs a call and a wrapper.
// The apache-tvm wheel ships no Relax headers, so fields are found by reflection, by the
// names Python sees, and read at the offsets it gives (class Field). The layout is
// described, and decoded, in digest.py, which also holds a Python writer of the same
// layout; the tests compare the two. ReadAhead, at the end, does the reads on a thread.
#include <tvm/ffi/tvm_ffi.h>
#include <tvm/ffi/container/array.h>
#include <tvm/ffi/dtype.h>
#include <tvm/ffi/reflection/accessor.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
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

// A field of a TVM object, read in place at its offset when its declared type (an
// object) or its value cell (a string, an integer) says what is there: no getter call,
// no copy, no reference count touched (the function being read keeps every part
// alive). A var's name through its getter was half of the reader's time. Anything
// else goes through the field's reflection getter.
class Field {
 public:
  Field(const char* type_key, const char* name) : info_(reflection::GetFieldInfo(type_key, name)) {
    int32_t type = info_->field_static_type_index;
    in_place_ = info_->size == sizeof(void*) && type >= TypeIndex::kTVMFFIStaticObjectBegin &&
                type != TypeIndex::kTVMFFIStr && type != TypeIndex::kTVMFFIBytes;
  }

  // The object in the field, borrowed; null for None.
  const Object* Obj(const Object* obj) const {
    const char* addr = reinterpret_cast<const char*>(obj) + info_->offset;
    if (in_place_) return *reinterpret_cast<const Object* const*>(addr);
    Optional<ObjectRef> value = (*this)(obj).cast<Optional<ObjectRef>>();
    return value.has_value() ? value.value().get() : nullptr;  // still held by `obj`
  }

  // The text of a string field, read in place from its cell (a short string inline,
  // else a string object) without a getter call or a copy; a cell that holds anything
  // else goes through the getter, the copy kept in `keep`.
  std::string_view Text(const Object* obj, String* keep) const {
    const TVMFFIAny* cell = Cell(obj);
    if (cell != nullptr && cell->type_index == TypeIndex::kTVMFFISmallStr) {
      return std::string_view(cell->v_bytes, cell->small_str_len);
    }
    if (cell != nullptr && cell->type_index == TypeIndex::kTVMFFIStr) {
      const TVMFFIByteArray* bytes = TVMFFIBytesGetByteArrayPtr(cell->v_obj);
      return std::string_view(bytes->data, bytes->size);
    }
    *keep = (*this)(obj).cast<String>();
    return std::string_view(keep->data(), keep->size());
  }

  // An integer field (a shape's dims are big-integer cells), in place when it fits.
  int64_t Int(const Object* obj) const {
    const TVMFFIAny* cell = Cell(obj);
    return cell != nullptr && cell->type_index == TypeIndex::kTVMFFIInt ? cell->v_int64 : (*this)(obj).cast<int64_t>();
  }

  Any operator()(const Object* obj) const {
    Any result;
    void* addr = const_cast<char*>(reinterpret_cast<const char*>(obj) + info_->offset);
    TVM_FFI_CHECK_SAFE_CALL(info_->getter(addr, reinterpret_cast<TVMFFIAny*>(&result)));
    return result;
  }

 private:
  // The field as a value cell, when it is one.
  const TVMFFIAny* Cell(const Object* obj) const {
    if (info_->size != sizeof(TVMFFIAny)) return nullptr;
    return reinterpret_cast<const TVMFFIAny*>(reinterpret_cast<const char*>(obj) + info_->offset);
  }

  const TVMFFIFieldInfo* info_;
  bool in_place_;
};

// The elements of an Array field, borrowed like Field::Obj's.
class Seq {
 public:
  explicit Seq(const Object* array) : array_(static_cast<const ArrayObj*>(array)) {
    TVM_FFI_CHECK(array != nullptr && array->type_index() == TypeIndex::kTVMFFIArray, RuntimeError)
        << "relaytrace's IR reader expected an Array";
  }
  size_t size() const { return array_->size(); }
  const Object* operator[](size_t i) const {
    const TVMFFIAny* any = reinterpret_cast<const TVMFFIAny*>(&(*array_)[static_cast<int64_t>(i)]);
    return any->type_index >= TypeIndex::kTVMFFIStaticObjectBegin ? reinterpret_cast<const Object*>(any->v_obj) : nullptr;
  }

 private:
  const ArrayObj* array_;
};

struct Schema {
  TypeRef function = Lookup("relax.expr.Function"), var = Lookup("ir.Var"), constant = Lookup("ir.Constant", false),
          generic_const = Lookup("ir.GenericConst", false), tuple = Lookup("ir.Tuple"),
          item = Lookup("ir.TupleGetItem"), call = Lookup("ir.Call"), op = Lookup("ir.Op"),
          global = Lookup("ir.GlobalVar"), extern_func = Lookup("relax.expr.ExternFunc"),
          string_imm = Lookup("ir.StringImm"), seq = Lookup("relax.expr.SeqExpr"),
          tensor_type = Lookup("relax.TensorType"), tuple_type = Lookup("ir.TupleType"),
          prim_type = Lookup("ir.PrimType"), shape_expr = Lookup("relax.expr.ShapeExpr"),
          int_imm = Lookup("ir.IntImm");
  Field params{"relax.expr.Function", "params"}, body{"relax.expr.Function", "body"},
      blocks{"relax.expr.SeqExpr", "blocks"}, seq_body{"relax.expr.SeqExpr", "body"},
      bindings{"relax.expr.BindingBlock", "bindings"}, binding_var{"relax.expr.Binding", "var"},
      binding_value{"relax.expr.VarBinding", "value"}, var_name{"ir.Var", "name"}, ty{"ir.Expr", "ty"},
      call_op{"ir.Call", "op"}, call_args{"ir.Call", "args"}, fields{"ir.Tuple", "fields"},
      tuple_value{"ir.TupleGetItem", "tuple_value"}, item_index{"ir.TupleGetItem", "index"},
      op_name{"ir.Op", "name"}, name_hint{"ir.GlobalVar", "name_hint"},
      global_symbol{"relax.expr.ExternFunc", "global_symbol"}, string_value{"ir.StringImm", "value"},
      tuple_fields{"ir.TupleType", "fields"}, tensor_dtype{"relax.TensorType", "dtype"},
      tensor_shape{"relax.TensorType", "shape"}, prim_dtype{"ir.PrimType", "dtype"},
      shape_values{"relax.expr.ShapeExpr", "values"}, int_value{"ir.IntImm", "value"};
};

int64_t Handle(const Object* obj) { return reinterpret_cast<int64_t>(obj); }

std::vector<std::string> Split(const std::string& joined) {
  std::vector<std::string> out;
  for (size_t start = 0, end; start < joined.size(); start = end + 1) {
    end = joined.find('\0', start);
    if (end == std::string::npos) end = joined.size();
    out.push_back(joined.substr(start, end - start));
  }
  return out;
}

class Writer {
 public:
  enum Wrapper : int8_t { kNone = 0, kCallTir, kPacked };

  Writer(const Schema& s, bool types, std::vector<std::string> tir_ops, std::vector<std::string> packed_ops)
      : s_(s), types_(types), tir_ops_(std::move(tir_ops)), packed_ops_(std::move(packed_ops)) {}

  std::vector<int64_t> out;
  std::string strings;
  String keep;  // a name read through a getter, while it is copied

  // Interned by view: the views point into `texts_`, whose elements never move.
  int64_t Str(std::string_view text) {
    auto found = string_index_.find(text);
    if (found != string_index_.end()) return found->second;
    texts_.emplace_back(text);
    int64_t index = Append(text);
    string_index_.emplace(texts_.back(), index);
    return index;
  }

  // A var's name, not interned: names seldom repeat within a function, so a look-up
  // per binding would find nothing to share.
  int64_t Append(std::string_view text) {
    strings += text;
    strings.push_back('\0');
    return count_++;
  }

  // A type as text: per tensor its dtype and dims, split by ASCII separators as in
  // digest.py; interned. What origins need of a type, cheaper than a structural hash.
  int64_t Type(const Object* expr) {
    if (!types_) return kNotAsked;
    auto found = types_of_.find(expr);  // a var is written once bound, then once per use
    if (found != types_of_.end()) return found->second;
    const Object* ty = s_.ty.Obj(expr);
    text_.clear();
    int64_t type = ty != nullptr && !TypeText(ty, &text_) ? kSymbolic : Str(text_);
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
        Seq fields(s_.fields.Obj(e));
        Put(kTuple, Handle(e), static_cast<int64_t>(fields.size()));
        for (size_t i = 0; i < fields.size(); ++i) Expr(fields[i]);
        break;
      }
      case kItemClass:
        Put(kItem, Handle(e), s_.item_index(e).cast<int64_t>());
        Expr(s_.tuple_value.Obj(e));
        break;
      case kCallClass: {
        Seq args(s_.call_args.Obj(e));
        Put(kCall, Handle(e), static_cast<int64_t>(args.size()));
        Expr(s_.call_op.Obj(e));
        for (size_t i = 0; i < args.size(); ++i) Expr(args[i]);
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
    Wrapper wrapper = out[callee] == kOp ? wrappers_[name] : kNone;
    if (!args.empty() && wrapper == kCallTir) {
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
    } else if (!args.empty() && wrapper == kPacked) {
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
      Seq fields(s_.tuple_fields.Obj(ty));
      for (size_t i = 0; i < fields.size(); ++i) {
        if (!TypeText(fields[i], text)) return false;
      }
      return true;
    }
    if (!IsA(ty, s_.tensor_type)) return true;  // no tensor in it
    const Object* dtype = s_.tensor_dtype.Obj(ty);
    if (dtype == nullptr || !IsA(dtype, s_.prim_type)) return false;
    if (!text->empty()) text->push_back(kTensor);
    *text += DtypeText(s_.prim_dtype(dtype).cast<DLDataType>());
    text->push_back(kDtype);
    const Object* shape = s_.tensor_shape.Obj(ty);
    if (shape == nullptr || !IsA(shape, s_.shape_expr)) return true;
    Seq dims(s_.shape_values.Obj(shape));
    for (size_t i = 0; i < dims.size(); ++i) {
      if (dims[i] == nullptr || !IsA(dims[i], s_.int_imm)) return false;
      if (i > 0) text->push_back(kDim);
      *text += std::to_string(s_.int_value.Int(dims[i]));
    }
    return true;
  }

  // A model has a handful of dtypes; printing one is a call into the FFI library.
  const std::string& DtypeText(DLDataType dtype) {
    for (const auto& [known, text] : dtypes_) {
      if (known.code == dtype.code && known.bits == dtype.bits && known.lanes == dtype.lanes) return text;
    }
    dtypes_.emplace_back(dtype, std::string(DLDataTypeToString(dtype)));
    return dtypes_.back().second;
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

  // An op's name, and whether the op wraps its callee (call_tir, call_packed).
  int64_t OpName(const Object* op) {
    std::string_view text = s_.op_name.Text(op, &keep);
    int64_t name = Str(text);
    auto in = [text](const std::vector<std::string>& ops) {
      return std::find(ops.begin(), ops.end(), text) != ops.end();
    };
    if (static_cast<size_t>(name) >= wrappers_.size()) wrappers_.resize(name + 1, kNone);
    wrappers_[name] = in(tir_ops_) ? kCallTir : in(packed_ops_) ? kPacked : kNone;
    return name;
  }

  // Ops, functions and symbols recur at many call sites: each is named once per call.
  void Callee(const Object* e) {
    auto found = callees_.find(e);
    if (found == callees_.end()) {
      std::pair<int64_t, int64_t> named;
      switch (ClassOf(e)) {
        case kOpClass:
          named = {kOp, OpName(e)};
          break;
        case kGlobalClass:
          named = {kGlobal, Str(s_.name_hint.Text(e, &keep))};
          break;
        case kExternFuncClass:
          named = {kExtern, Str(s_.global_symbol.Text(e, &keep))};
          break;
        case kStringImmClass:
          named = {kExtern, Str(s_.string_value.Text(e, &keep))};
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
  std::vector<std::string> tir_ops_, packed_ops_;
  std::deque<std::string> texts_;
  std::unordered_map<std::string_view, int64_t> string_index_;
  std::unordered_map<const Object*, int64_t> types_of_;
  std::unordered_map<const Object*, std::pair<int64_t, int64_t>> callees_;
  std::vector<std::pair<DLDataType, std::string>> dtypes_;
  std::vector<Class> classes_;
  std::vector<Wrapper> wrappers_;  // by string index: set for op names
  int64_t count_ = 0;
  std::string text_;
  std::vector<size_t> args_, inner_;  // CallRecord's scratch, kept to spare an allocation per call
};

// The bindings of a function's body, in order, and the body's result (null without one).
const Object* Bindings(const Schema& s, const Object* func, std::vector<const Object*>* out) {
  const Object* body = s.body.Obj(func);
  if (body == nullptr || !IsA(body, s.seq)) return nullptr;
  Seq blocks(s.blocks.Obj(body));
  for (size_t i = 0; i < blocks.size(); ++i) {
    Seq bindings(s.bindings.Obj(blocks[i]));
    for (size_t j = 0; j < bindings.size(); ++j) out->push_back(bindings[j]);
  }
  return s.seq_body.Obj(body);
}

}  // namespace

// [n_params, n_bindings, output offset | -1, n_changed], params as (handle, name, type),
// bindings as six columns (var and value handles, name, var type, value offset, call
// record offset), the stream (each value followed by its call record), then the
// positions of the bindings written in full. Returned with
// the string table. Of a binding object that `old` also has, only its var's handle is
// written (the rest zeros, offsets -1): the tracker knows the rest. Nothing at all
// when `old` has the same params, bindings and result: a rebuilt function around them.
Array<Any> digest(ObjectRef func, Optional<ObjectRef> old, bool types, String tir_ops, String packed_ops) {
  static const Schema schema;
  const Schema& s = schema;
  TVM_FFI_CHECK(IsA(func.get(), s.function) && (!old.has_value() || IsA(old.value().get(), s.function)),
                TypeError) << "relaytrace's IR reader reads Relax functions only";
  Writer w(s, types, Split(tir_ops), Split(packed_ops));
  Seq params(s.params.Obj(func.get()));
  std::vector<const Object*> bindings;
  const Object* output = Bindings(s, func.get(), &bindings);
  std::vector<const Object*> known;  // sorted: a look-up per binding, no allocation per entry
  if (old.has_value()) {
    const Object* old_output = Bindings(s, old.value().get(), &known);
    Seq old_params(s.params.Obj(old.value().get()));
    bool same_params = old_params.size() == params.size();
    for (size_t i = 0; same_params && i < params.size(); ++i) same_params = params[i] == old_params[i];
    if (same_params && output == old_output && known == bindings) return Array<Any>{};
    std::sort(known.begin(), known.end());
  }
  size_t n = bindings.size();
  w.out.reserve(24 * n);
  std::vector<int64_t> head = {static_cast<int64_t>(params.size()), static_cast<int64_t>(n), -1, 0};
  for (size_t i = 0; i < params.size(); ++i) {
    head.push_back(Handle(params[i]));
    head.push_back(w.Append(s.var_name.Text(params[i], &w.keep)));
    head.push_back(w.Type(params[i]));
  }
  std::vector<int64_t> cols(6 * n), changed;
  for (size_t i = 0; i < n; ++i) {
    const Object* var = s.binding_var.Obj(bindings[i]);
    cols[i] = Handle(var);
    if (std::binary_search(known.begin(), known.end(), bindings[i])) {
      cols[2 * n + i] = -1;
      cols[3 * n + i] = kNotAsked;
      cols[4 * n + i] = -1;
      cols[5 * n + i] = -1;
      continue;
    }
    const Object* value = s.binding_value.Obj(bindings[i]);
    changed.push_back(static_cast<int64_t>(i));
    cols[n + i] = Handle(value);
    cols[2 * n + i] = w.Append(s.var_name.Text(var, &w.keep));
    cols[3 * n + i] = w.Type(var);
    size_t at = w.out.size();
    cols[4 * n + i] = static_cast<int64_t>(at);
    w.Expr(value);
    cols[5 * n + i] = w.CallRecord(at);
  }
  if (output != nullptr) {
    head[2] = static_cast<int64_t>(w.out.size());
    w.Expr(output);
  }
  head[3] = static_cast<int64_t>(changed.size());
  std::string bytes((head.size() + cols.size() + w.out.size() + changed.size()) * sizeof(int64_t), '\0');
  char* at = bytes.data();
  for (const std::vector<int64_t>* part : {&head, &cols, &w.out, &changed}) {
    std::memcpy(at, part->data(), part->size() * sizeof(int64_t));
    at += part->size() * sizeof(int64_t);
  }
  return Array<Any>{Bytes(std::move(bytes)), Bytes(std::move(w.strings))};
}

namespace {

// The functions each pass changed are read on a thread of their own, in the order
// they are handed over, while TVM goes on compiling and, after the build, while the
// tracker works through those already read. The thread touches no Python and only
// reads IR objects, which no one changes once built (the caller holds them).
class ReadAhead {
 public:
  ReadAhead(String tir_ops, String packed_ops)
      : tir_ops_(std::move(tir_ops)), packed_ops_(std::move(packed_ops)), worker_([this] { Run(); }) {}

  ~ReadAhead() {  // reads not yet started are dropped
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    worker_.join();
  }

  void Add(ObjectRef func, Optional<ObjectRef> old, bool types) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      reads_.push_back(Read{std::move(func), std::move(old), types, Array<Any>(), std::string()});
    }
    wake_.notify_all();
  }

  // The i-th digest, once read; a read that failed raises here, with its reason.
  Array<Any> Take(int64_t i) {
    std::unique_lock<std::mutex> lock(mutex_);
    TVM_FFI_CHECK(i >= 0 && static_cast<size_t>(i) < reads_.size(), IndexError) << "no read " << i;
    ready_.wait(lock, [&] { return done_ > static_cast<size_t>(i); });
    TVM_FFI_CHECK(reads_[i].error.empty(), RuntimeError) << reads_[i].error;
    return reads_[i].result;
  }

 private:
  struct Read {
    ObjectRef func;
    Optional<ObjectRef> old;
    bool types;
    Array<Any> result;
    std::string error;
  };

  void Run() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (true) {
      wake_.wait(lock, [&] { return stop_ || done_ < reads_.size(); });
      if (stop_) return;
      Read& read = reads_[done_];  // a deque: other threads' push_back leave it in place
      ObjectRef func = read.func;
      Optional<ObjectRef> old = read.old;
      bool types = read.types;
      lock.unlock();
      Array<Any> result;
      std::string error;
      try {
        result = digest(func, old, types, tir_ops_, packed_ops_);
      } catch (const std::exception& e) {
        error = e.what();
      }
      lock.lock();
      read.result = std::move(result);
      read.error = std::move(error);
      ++done_;
      ready_.notify_all();
    }
  }

  String tir_ops_, packed_ops_;
  std::deque<Read> reads_;
  size_t done_ = 0;
  bool stop_ = false;
  std::mutex mutex_;
  std::condition_variable wake_, ready_;
  std::thread worker_;  // last: started once the rest is in place
};

}  // namespace

// A reader on its own thread, as two functions: add(func, old, types) queues a read
// as `digest` would make it; take(i) waits for the i-th and returns it.
Array<Any> read_ahead(String tir_ops, String packed_ops) {
  auto reader = std::make_shared<ReadAhead>(std::move(tir_ops), std::move(packed_ops));
  Function add = Function::FromTyped([reader](ObjectRef func, Optional<ObjectRef> old, bool types) {
    reader->Add(std::move(func), std::move(old), types);
  });
  Function take = Function::FromTyped([reader](int64_t i) { return reader->Take(i); });
  return Array<Any>{add, take};
}
