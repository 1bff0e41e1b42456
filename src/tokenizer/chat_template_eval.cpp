// Chat template evaluator: walks the syntax tree with Jinja's scoping (a for-loop iteration and a
// macro call get their own frame; if-blocks do not), loop objects, namespaces and macros.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "perfx/status.h"
#include "tokenizer/chat_template_internal.h"

namespace perfx::jinja {
namespace {

struct Frame {
  std::unordered_map<std::string, Value> vars;
  const Frame* parent = nullptr;
};

enum class Flow { Normal, Break, Continue };

class Evaluator {
 public:
  static constexpr int kMaxMacroDepth = 64;
  // Statements and expressions in progress, across macro calls. The parser bounds one template's
  // nesting (200 blocks, 200 expression levels), but macro calls stack those bounds on top of
  // each other; this one counter bounds the evaluator's recursion as a whole. Real templates stay
  // far below it (a recursive tool-schema macro: tens of levels).
  static constexpr int kMaxEvalDepth = 1000;

  explicit Evaluator(const Dict& globals) {
    for (const auto& kv : globals.items) root_.vars[kv.first] = kv.second;
    // Every namespace() of this render is kept, so that the destructor can empty them: a
    // namespace can hold itself (a shared_ptr cycle, leaked otherwise) or a long chain of others
    // (destroyed recursively otherwise).
    auto ns = root_.vars.find("namespace");
    if (ns != root_.vars.end() && ns->second.type == Value::Type::Function) {
      std::shared_ptr<Function> make = ns->second.fn;
      ns->second = Value::function([this, make](CallArgs& a) {
        for (const auto& p : a.pos) check_nesting(p, "namespace()", 0);
        for (const auto& kv : a.kw) check_nesting(kv.second, "namespace(" + kv.first + "=...)", 0);
        Value v = (*make)(a);
        if (v.is_dict()) namespaces_.push_back(v.dict);
        return v;
      });
    }
  }

  ~Evaluator() {
    for (const auto& d : namespaces_) d->items.clear();  // the others stay alive until the end
  }

  Evaluator(const Evaluator&) = delete;
  Evaluator& operator=(const Evaluator&) = delete;

  std::string run(const Body& tree) {
    std::string out;
    exec_body(tree, root_, out, false);
    return out;
  }

 private:
  // ---------------------------------------------------------------- statements

  Flow exec_body(const Body& body, Frame& f, std::string& out, bool in_loop) {
    for (const auto& n : body) {
      Flow fl = exec(*n, f, out, in_loop);
      if (fl != Flow::Normal) return fl;
    }
    return Flow::Normal;
  }

  // Bounds the recursion of exec() and eval() together (kMaxEvalDepth).
  class EvalDepth {
   public:
    EvalDepth(int& d, int line) : d_(d) {
      charge_work(1, line);
      if (++d_ > kMaxEvalDepth) {
        --d_;
        fail("statements and expressions nested more than " + std::to_string(kMaxEvalDepth) +
                 " levels deep (counting macro calls)",
             line);
      }
    }
    ~EvalDepth() { --d_; }
    EvalDepth(const EvalDepth&) = delete;
    EvalDepth& operator=(const EvalDepth&) = delete;

   private:
    int& d_;
  };

  Flow exec(const Node& n, Frame& f, std::string& out, bool in_loop) {
    EvalDepth depth(eval_depth_, n.line);
    switch (n.kind) {
      case Node::Kind::Text:
        append(out, n.text, n.line);
        return Flow::Normal;
      case Node::Kind::Output:
        append(out, eval(*n.expr, f).str(), n.line);
        return Flow::Normal;
      case Node::Kind::If:
        for (const auto& br : n.branches) {
          if (eval(*br.first, f).truthy()) return exec_body(br.second, f, out, in_loop);
        }
        return exec_body(n.else_body, f, out, in_loop);
      case Node::Kind::For:
        exec_for(n, f, out);
        return Flow::Normal;
      case Node::Kind::Set:
        exec_set(n, f);
        return Flow::Normal;
      case Node::Kind::Macro:
        define_macro(n, f);
        return Flow::Normal;
      case Node::Kind::FilterBlock: {
        std::string inner;
        Flow fl = exec_body(n.body, f, inner, in_loop);
        append(out, filter_chain(*n.expr, Value::string(std::move(inner)), f).str(), n.line);
        return fl;
      }
      case Node::Kind::Break:
      case Node::Kind::Continue:
        if (!in_loop)
          fail(n.kind == Node::Kind::Break ? "break outside a loop" : "continue outside a loop",
               n.line);
        return n.kind == Node::Kind::Break ? Flow::Break : Flow::Continue;
      case Node::Kind::Do:
        eval(*n.expr, f);
        return Flow::Normal;
      case Node::Kind::Generation:
        return exec_body(n.body, f, out, in_loop);
    }
    return Flow::Normal;
  }

  // Appends to the text being rendered (the prompt, or a macro's, set block's or filter block's).
  static void append(std::string& out, const std::string& s, int line) {
    check_size(out.size() + s.size(), "the rendered text", line);
    charge_work(static_cast<int64_t>(s.size() / 256), line);
    out += s;
  }

  static List iterate(const Value& v, int line) {
    switch (v.type) {
      case Value::Type::List:
        return *v.list;
      case Value::Type::Dict: {
        List keys;
        for (const auto& kv : v.dict->items) keys.push_back(Value::string(kv.first));
        return keys;
      }
      case Value::Type::String: {
        const std::u32string u = to_u32(v.s);
        check_items(u.size(), "the list of a string's characters", line);
        List chars;
        for (char32_t c : u) chars.push_back(Value::string(from_u32(std::u32string(1, c))));
        return chars;
      }
      case Value::Type::Undefined:
        return {};
      default:
        fail("cannot iterate over " + v.type_name(), line);
    }
  }

  void bind_targets(const std::vector<std::string>& targets, const Value& item, Frame& f,
                    int line) {
    if (targets.size() == 1) {
      f.vars[targets[0]] = item;
      return;
    }
    if (!item.is_list() || item.list->size() != targets.size())
      fail("cannot unpack " + item.type_name() + " into " + std::to_string(targets.size()) +
               " names",
           line);
    for (size_t k = 0; k < targets.size(); ++k) f.vars[targets[k]] = (*item.list)[k];
  }

  [[gnu::noinline]] void exec_for(const Node& n, Frame& f, std::string& out) {
    List all = iterate(eval(*n.expr, f), n.line);
    List items;
    if (n.filter) {
      for (const auto& it : all) {
        charge_work(1, n.line);
        Frame tmp;
        tmp.parent = &f;
        bind_targets(n.targets, it, tmp, n.line);
        if (eval(*n.filter, tmp).truthy()) items.push_back(it);
      }
    } else {
      items = std::move(all);
    }
    if (items.empty()) {
      exec_body(n.else_body, f, out, false);
      return;
    }
    const int64_t len = static_cast<int64_t>(items.size());
    for (int64_t k = 0; k < len; ++k) {
      charge_work(1, n.line);
      Frame it;
      it.parent = &f;
      bind_targets(n.targets, items[static_cast<size_t>(k)], it, n.line);
      Value loop = Value::make_dict();
      Dict& d = *loop.dict;
      d.set("index0", Value::integer(k));
      d.set("index", Value::integer(k + 1));
      d.set("revindex0", Value::integer(len - k - 1));
      d.set("revindex", Value::integer(len - k));
      d.set("first", Value::boolean(k == 0));
      d.set("last", Value::boolean(k == len - 1));
      d.set("length", Value::integer(len));
      d.set("depth", Value::integer(1));
      d.set("depth0", Value::integer(0));
      d.set("previtem", k > 0 ? items[static_cast<size_t>(k - 1)] : Value::undefined("previtem"));
      d.set("nextitem",
            k + 1 < len ? items[static_cast<size_t>(k + 1)] : Value::undefined("nextitem"));
      d.set("cycle", Value::function([k](CallArgs& a) {
              if (a.pos.empty()) return Value::undefined();
              return a.pos[static_cast<size_t>(k) % a.pos.size()];
            }));
      it.vars["loop"] = loop;
      if (exec_body(n.body, it, out, true) == Flow::Break) break;
    }
  }

  [[gnu::noinline]] void exec_set(const Node& n, Frame& f) {
    Value v;
    if (n.expr) {
      v = eval(*n.expr, f);
    } else {
      std::string inner;
      exec_body(n.body, f, inner, false);
      v = Value::string(std::move(inner));
    }
    if (n.attr_target) {
      Value target = lookup(n.targets[0], f);
      if (!target.is_dict() || !target.dict->is_namespace)
        fail("cannot set attribute '" + n.targets[1] + "' of " + target.type_name() +
                 " (only namespace() objects can be assigned to)",
             n.line);
      check_nesting(v, n.targets[0] + "." + n.targets[1], n.line);
      target.dict->set(n.targets[1], std::move(v));
      return;
    }
    check_nesting(v, n.targets.size() == 1 ? n.targets[0] : "(" + n.targets[0] + ", ...)",
                  n.line);
    bind_targets(n.targets, v, f, n.line);
  }

  // Levels of lists and (non-namespace) dicts in `v`, counted up to kMaxValueDepth + 1 (then the
  // walk stops); a namespace counts as one level (its attributes are checked when they are set).
  // `memo` holds the height of each list or dict already measured: parts can be shared (60 times
  // `{% set x = [x, x] %}` is 2^60 paths through 61 lists), so each is measured once.
  static int height(const Value& v, int depth, std::unordered_map<const void*, int>& memo) {
    const bool list = v.is_list(), dict = v.is_dict() && !v.dict->is_namespace;
    if (!list && !dict) return v.is_dict() ? 1 : 0;
    const void* key = list ? static_cast<const void*>(v.list.get()) : v.dict.get();
    if (auto it = memo.find(key); it != memo.end()) return it->second;
    if (depth > kMaxValueDepth) return kMaxValueDepth + 1;
    int h = 0;
    if (list) {
      for (const auto& e : *v.list) h = std::max(h, height(e, depth + 1, memo));
    } else {
      for (const auto& kv : v.dict->items) h = std::max(h, height(kv.second, depth + 1, memo));
    }
    memo[key] = std::min(h + 1, kMaxValueDepth + 1);
    return memo[key];
  }

  // Every value stored in a variable or a namespace attribute (by set or namespace()) nests at
  // most kMaxValueDepth levels: a loop that wraps a value in a list each time (`{% set ns.a =
  // [ns.a] %}`, or a long run of `{% set x = [x] %}`) would otherwise build a value whose
  // destructor and printer recurse as deep as the loop ran.
  static void check_nesting(const Value& v, const std::string& name, int line) {
    std::unordered_map<const void*, int> memo;
    if (height(v, 0, memo) > kMaxValueDepth)
      fail("value assigned to '" + name + "' nested more than " + std::to_string(kMaxValueDepth) +
               " levels deep",
           line);
  }

  [[gnu::noinline]] void define_macro(const Node& n, Frame& f) {
    const Node* node = &n;
    f.vars[n.targets[0]] = Value::function([this, node](CallArgs& args) {
      // A macro that calls itself without end (fuzz_chat_template found one) would overflow the
      // stack; real templates nest a few calls (recursive tool-schema macros).
      if (macro_depth_ >= kMaxMacroDepth)
        fail("macro '" + node->targets[0] + "' nested more than " +
                 std::to_string(kMaxMacroDepth) + " calls deep (endless recursion?)",
             node->line);
      struct DepthGuard {
        int& d;
        explicit DepthGuard(int& x) : d(x) { ++d; }
        ~DepthGuard() { --d; }
      } guard(macro_depth_);
      Frame mf;
      mf.parent = &root_;
      size_t k = 0;
      for (const auto& p : node->params) {
        Value v = Value::undefined(p.first);
        bool given = false;
        if (k < args.pos.size()) {
          v = args.pos[k];
          given = true;
        }
        for (const auto& kv : args.kw) {
          if (kv.first == p.first) {
            v = kv.second;
            given = true;
          }
        }
        if (!given && p.second) v = eval(*p.second, mf);
        mf.vars[p.first] = v;
        ++k;
      }
      if (args.pos.size() > node->params.size())
        fail("too many arguments for macro '" + node->targets[0] + "'", node->line);
      std::string out;
      exec_body(node->body, mf, out, false);
      return Value::string(std::move(out));
    });
  }

  // ---------------------------------------------------------------- expressions

  Value lookup(const std::string& name, const Frame& f) const {
    for (const Frame* p = &f; p; p = p->parent) {
      auto it = p->vars.find(name);
      if (it != p->vars.end()) return it->second;
    }
    return Value::undefined(name);
  }

  [[gnu::noinline]] CallArgs eval_args(const Expr& e, Frame& f) {
    CallArgs args;
    for (const auto& it : e.items) args.pos.push_back(eval(*it, f));
    for (const auto& kv : e.kwargs) args.kw.emplace_back(kv.first, eval(*kv.second, f));
    return args;
  }

  static Value get_attr(const Value& obj, const std::string& name) {
    if (obj.is_dict()) {
      const Value* v = obj.dict->find(name);
      if (v) return *v;
    }
    return Value::undefined(name);
  }

  static int64_t norm_index(int64_t idx, int64_t len) { return idx < 0 ? idx + len : idx; }

  static Value get_item(const Value& obj, const Value& key, int line) {
    if (obj.is_dict()) {
      if (!key.is_string()) return get_attr(obj, key.str());
      return get_attr(obj, key.s);
    }
    if (obj.is_list() || obj.is_string()) {
      if (key.type != Value::Type::Int) {
        if (key.is_string()) return Value::undefined(key.s);
        fail("index must be an integer, not " + key.type_name(), line);
      }
      if (obj.is_list()) {
        int64_t n = static_cast<int64_t>(obj.list->size());
        int64_t k = norm_index(key.i, n);
        if (k < 0 || k >= n) return Value::undefined();
        return (*obj.list)[static_cast<size_t>(k)];
      }
      std::u32string u = to_u32(obj.s);
      int64_t n = static_cast<int64_t>(u.size());
      int64_t k = norm_index(key.i, n);
      if (k < 0 || k >= n) return Value::undefined();
      return Value::string(from_u32(u.substr(static_cast<size_t>(k), 1)));
    }
    if (obj.is_undefined() || obj.is_none()) return Value::undefined();
    fail("cannot index " + obj.type_name(), line);
  }

  [[gnu::noinline]] Value slice(const Expr& e, Frame& f) {
    Value obj = eval(*e.a, f);
    auto opt = [&](size_t k, bool& present) -> int64_t {
      present = false;
      if (!e.items[k]) return 0;
      Value v = eval(*e.items[k], f);
      if (v.is_none()) return 0;
      if (v.type != Value::Type::Int) fail("slice indices must be integers", e.line);
      present = true;
      return v.i;
    };
    bool has_start, has_stop, has_step;
    int64_t start = opt(0, has_start), stop = opt(1, has_stop), step = opt(2, has_step);
    if (!has_step) step = 1;
    if (step == 0) fail("slice step cannot be zero", e.line);
    auto pick = [&](int64_t len, auto&& emit) {
      auto clamp = [&](int64_t v, bool present, int64_t def) -> int64_t {
        if (!present) return def;
        if (v < 0) v += len;
        if (step > 0) return std::min(std::max<int64_t>(v, 0), len);
        return std::min(std::max<int64_t>(v, -1), len - 1);
      };
      int64_t s = clamp(start, has_start, step > 0 ? 0 : len - 1);
      int64_t t = clamp(stop, has_stop, step > 0 ? len : -1);
      for (int64_t k = s; step > 0 ? k < t : k > t; k += step) emit(k);
    };
    if (obj.is_list()) {
      List out;
      pick(static_cast<int64_t>(obj.list->size()),
           [&](int64_t k) { out.push_back((*obj.list)[static_cast<size_t>(k)]); });
      return Value::make_list(std::move(out));
    }
    if (obj.is_string()) {
      std::u32string u = to_u32(obj.s), out;
      pick(static_cast<int64_t>(u.size()), [&](int64_t k) { out += u[static_cast<size_t>(k)]; });
      return Value::string(from_u32(out));
    }
    if (obj.is_undefined() || obj.is_none()) return Value::undefined();
    fail("cannot slice " + obj.type_name(), e.line);
  }

  [[gnu::noinline]] Value call(const Expr& e, Frame& f) {
    CallArgs args = eval_args(e, f);
    if (e.a->kind == Expr::Kind::Attr) {
      Value obj = eval(*e.a->a, f);
      if (obj.is_dict()) {
        const Value* m = obj.dict->find(e.a->name);
        if (m && m->type == Value::Type::Function) return (*m->fn)(args);
      }
      return call_method(obj, e.a->name, args, e.line);
    }
    Value fn = eval(*e.a, f);
    if (fn.type != Value::Type::Function) {
      std::string what = e.a->kind == Expr::Kind::Name ? "'" + e.a->name + "'" : fn.type_name();
      if (fn.is_undefined() && e.a->kind == Expr::Kind::Name)
        fail("unsupported function " + what, e.line);
      fail("cannot call " + what, e.line);
    }
    return (*fn.fn)(args);
  }

  [[gnu::noinline]] Value filter_chain(const Expr& e, Value input, Frame& f) {
    Value base = e.a ? filter_chain(*e.a, std::move(input), f) : std::move(input);
    CallArgs args = eval_args(e, f);
    return built(apply_filter(e.name, base, args, e.line), e.line);
  }

  // A filter's or call's result: within the size limits, and charged to the work budget (a
  // filter applied in a loop to its own output, such as `{% set ns.a = [ns.a]|string %}`, grew a
  // string exponentially: repr doubles its backslashes).
  static Value built(Value v, int line) {
    if (v.is_string()) {
      check_size(v.s.size(), "a string", line);
      charge_work(static_cast<int64_t>(v.s.size() / 256), line);
    } else if (v.is_list()) {
      check_items(v.list->size(), "a list", line);
      charge_work(static_cast<int64_t>(v.list->size() / 16), line);
    }
    return v;
  }

  // a < b <= c ...: each operand evaluated once, stops at the first false comparison.
  [[gnu::noinline]] Value compare(const Expr& e, Frame& f) {
    Value l = eval(*e.items[0], f);
    for (size_t k = 0; k < e.ops.size(); ++k) {
      Value r = eval(*e.items[k + 1], f);
      if (!compare_op(e.ops[k], l, r, e.line)) return Value::boolean(false);
      l = std::move(r);
    }
    return Value::boolean(true);
  }

  static bool compare_op(const std::string& op, const Value& l, const Value& r, int line) {
    if (op == "==") return equals(l, r);
    if (op == "!=") return !equals(l, r);
    if (op == "in" || op == "not in") {
      bool found = false;
      if (r.is_string()) {
        if (!l.is_string()) fail("'in <string>' requires a string on the left", line);
        found = r.s.find(l.s) != std::string::npos;
      } else if (r.is_list()) {
        for (const auto& x : *r.list) found = found || equals(l, x);
      } else if (r.is_dict()) {
        found = l.is_string() && r.dict->find(l.s) != nullptr;
      } else if (!r.is_undefined() && !r.is_none()) {
        fail("'in' needs a string, list or dict on the right, not " + r.type_name(), line);
      }
      return op == "in" ? found : !found;
    }
    try {
      if (op == "<") return less(l, r);
      if (op == ">") return less(r, l);
      if (op == "<=") return !less(r, l);
      if (op == ">=") return !less(l, r);
    } catch (const Error&) {
      fail("cannot compare " + l.type_name() + " with " + r.type_name() + " using '" + op + "'",
           line);
    }
    fail("unknown comparison '" + op + "'", line);
  }

  [[gnu::noinline]] Value binary(const Expr& e, Frame& f) {
    const std::string& op = e.name;
    if (op == "and") {
      Value l = eval(*e.a, f);
      return l.truthy() ? eval(*e.b, f) : l;
    }
    if (op == "or") {
      Value l = eval(*e.a, f);
      return l.truthy() ? l : eval(*e.b, f);
    }
    Value l = eval(*e.a, f);
    Value r = eval(*e.b, f);
    if (op == "~") {
      std::string a = l.str(), b = r.str();
      check_size(a.size() + b.size(), "the result of ~", e.line);
      charge_work(static_cast<int64_t>((a.size() + b.size()) / 256), e.line);
      return Value::string(a + b);
    }
    if (op == "+") {
      if (l.is_string() && r.is_string()) {
        check_size(l.s.size() + r.s.size(), "the result of +", e.line);
        charge_work(static_cast<int64_t>((l.s.size() + r.s.size()) / 256), e.line);
        return Value::string(l.s + r.s);
      }
      if (l.is_list() && r.is_list()) {
        check_items(l.list->size() + r.list->size(), "the result of +", e.line);
        charge_work(static_cast<int64_t>((l.list->size() + r.list->size()) / 16), e.line);
        List out = *l.list;
        out.insert(out.end(), r.list->begin(), r.list->end());
        return Value::make_list(std::move(out));
      }
    }
    if (op == "*") {
      // A template renders a prompt: a repetition past kMaxRepeatItems characters or items is an
      // error, not minutes of work or an out-of-memory.
      constexpr int64_t kMaxRepeatItems = 1 << 24;
      auto too_big = [&](size_t unit) {
        if (r.i > 0 && unit > 0 && (int64_t)unit > kMaxRepeatItems / r.i)
          fail("repetition " + op + " " + std::to_string(r.i) + " is too large (over " +
                   std::to_string(kMaxRepeatItems) + " characters or items)",
               e.line);
      };
      if (l.is_string() && r.type == Value::Type::Int) {
        too_big(l.s.size());
        charge_work(static_cast<int64_t>(l.s.size()) * std::max<int64_t>(r.i, 0) / 256, e.line);
        std::string out;
        for (int64_t k = 0; k < r.i; ++k) out += l.s;
        return Value::string(out);
      }
      if (l.is_list() && r.type == Value::Type::Int) {
        too_big(l.list->size());
        check_items(l.list->size() * static_cast<size_t>(std::max<int64_t>(r.i, 0)),
                    "the repetition *", e.line);
        charge_work(static_cast<int64_t>(l.list->size()) * std::max<int64_t>(r.i, 0) / 16, e.line);
        List out;
        for (int64_t k = 0; k < r.i; ++k) out.insert(out.end(), l.list->begin(), l.list->end());
        return Value::make_list(std::move(out));
      }
    }
    auto numeric = [](const Value& v) { return v.is_number() || v.type == Value::Type::Bool; };
    if (!numeric(l) || !numeric(r)) {
      std::string hint;
      if (l.is_undefined() || r.is_undefined()) {
        const Value& u = l.is_undefined() ? l : r;
        hint = u.s.empty() ? " (a value is undefined)" : " ('" + u.s + "' is undefined)";
      }
      fail("unsupported operand types for " + op + ": " + l.type_name() + " and " + r.type_name() +
               hint,
           e.line);
    }
    auto as_int = [](const Value& v) { return v.type == Value::Type::Bool ? int64_t{v.b} : v.i; };
    auto as_num = [](const Value& v) {
      return v.type == Value::Type::Bool ? (v.b ? 1.0 : 0.0) : v.as_double();
    };
    bool ints = l.type != Value::Type::Float && r.type != Value::Type::Float;
    // Python's ints do not overflow; ours are int64, so an overflow is an error (never UB).
    auto overflow = [&]() { fail("integer overflow in " + op + " (values beyond 64 bits)", e.line); };
    int64_t res = 0;
    if (op == "+" || op == "-" || op == "*") {
      if (!ints) {
        const double a = as_num(l), b = as_num(r);
        return Value::number(op == "+" ? a + b : op == "-" ? a - b : a * b);
      }
      const int64_t a = as_int(l), b = as_int(r);
      const bool over = op == "+"   ? __builtin_add_overflow(a, b, &res)
                        : op == "-" ? __builtin_sub_overflow(a, b, &res)
                                    : __builtin_mul_overflow(a, b, &res);
      if (over) overflow();
      return Value::integer(res);
    }
    if (op == "/") {
      if (as_num(r) == 0) fail("division by zero", e.line);
      return Value::number(as_num(l) / as_num(r));
    }
    if (op == "//" || op == "%") {
      if (as_num(r) == 0) fail("division by zero", e.line);
      if (ints) {
        int64_t a = as_int(l), b = as_int(r);
        if (b == -1) {  // INT64_MIN / -1 traps
          if (op == "%") return Value::integer(0);
          if (a == INT64_MIN) overflow();
          return Value::integer(-a);
        }
        int64_t q = a / b;
        if ((a % b != 0) && ((a < 0) != (b < 0))) --q;  // floor
        return op == "//" ? Value::integer(q) : Value::integer(a - q * b);
      }
      double a = as_num(l), b = as_num(r);
      double q = std::floor(a / b);
      return op == "//" ? Value::number(q) : Value::number(a - q * b);
    }
    if (op == "**") {
      if (ints && as_int(r) >= 0) {
        const int64_t base = as_int(l), exp = as_int(r);
        if (base == 0 || base == 1 || exp == 0) return Value::integer(exp == 0 ? 1 : base);
        if (base == -1) return Value::integer(exp % 2 ? -1 : 1);
        int64_t out = 1;  // |base| >= 2: at most 63 steps before an overflow
        for (int64_t k = 0; k < exp; ++k)
          if (__builtin_mul_overflow(out, base, &out)) overflow();
        return Value::integer(out);
      }
      return Value::number(std::pow(as_num(l), as_num(r)));
    }
    fail("unknown operator '" + op + "'", e.line);
  }

  Value eval(const Expr& e, Frame& f) {
    EvalDepth depth(eval_depth_, e.line);
    switch (e.kind) {
      case Expr::Kind::Literal:
        return e.value;
      case Expr::Kind::Name:
        return lookup(e.name, f);
      case Expr::Kind::List:
      case Expr::Kind::Tuple: {
        List items;
        for (const auto& it : e.items) items.push_back(eval(*it, f));
        if (e.kind == Expr::Kind::Tuple) return Value::make_tuple(std::move(items));
        return Value::make_list(std::move(items));
      }
      case Expr::Kind::Dict: {
        Value d = Value::make_dict();
        for (size_t k = 0; k + 1 < e.items.size(); k += 2) {
          Value key = eval(*e.items[k], f);
          d.dict->set(key.str(), eval(*e.items[k + 1], f));
        }
        return d;
      }
      case Expr::Kind::Attr:
        return get_attr(eval(*e.a, f), e.name);
      case Expr::Kind::Index:
        return get_item(eval(*e.a, f), eval(*e.b, f), e.line);
      case Expr::Kind::Slice:
        return slice(e, f);
      case Expr::Kind::Call:
        return built(call(e, f), e.line);
      case Expr::Kind::Filter: {
        Value v = eval(*e.a, f);
        CallArgs args = eval_args(e, f);
        return built(apply_filter(e.name, v, args, e.line), e.line);
      }
      case Expr::Kind::Test: {
        Value v = eval(*e.a, f);
        CallArgs args = eval_args(e, f);
        bool r = apply_test(e.name, v, args, e.line);
        return Value::boolean(e.negated ? !r : r);
      }
      case Expr::Kind::Unary: {
        Value v = eval(*e.a, f);
        if (e.name == "not") return Value::boolean(!v.truthy());
        if (v.type == Value::Type::Int) {
          if (e.name == "-" && v.i == INT64_MIN) fail("integer overflow in unary -", e.line);
          return Value::integer(e.name == "-" ? -v.i : v.i);
        }
        if (v.type == Value::Type::Float) return Value::number(e.name == "-" ? -v.f : v.f);
        fail("bad operand type for unary " + e.name + ": " + v.type_name(), e.line);
      }
      case Expr::Kind::Binary:
        return binary(e, f);
      case Expr::Kind::Compare:
        return compare(e, f);
      case Expr::Kind::Cond:
        if (eval(*e.a, f).truthy()) return eval(*e.b, f);
        return e.c ? eval(*e.c, f) : Value::undefined();
    }
    return Value::undefined();
  }

  Frame root_;
  int macro_depth_ = 0;  // macro calls in progress (kMaxMacroDepth)
  int eval_depth_ = 0;   // exec() and eval() calls in progress (kMaxEvalDepth)
  std::vector<std::shared_ptr<Dict>> namespaces_;  // every namespace() of this render
};

}  // namespace

std::string render(const Body& tree, const Dict& globals, int64_t max_work) {
  RenderBudget budget(max_work);
  return Evaluator(globals).run(tree);
}

}  // namespace perfx::jinja
