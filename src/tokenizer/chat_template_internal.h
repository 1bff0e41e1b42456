// Internals of the chat template interpreter (chat_template.h): values, lexer tokens, the syntax
// tree, and the entry points of the lexer, parser and evaluator. Not part of the public API.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace perfx::jinja {

// ------------------------------------------------------------------------------------------------
// Values

struct Value;
using List = std::vector<Value>;
struct Dict;
struct CallArgs;
using Function = std::function<Value(CallArgs&)>;

/// A Jinja value: Python-like semantics (None, bool, int, float, str, list, dict) plus Undefined
/// (a missing variable/key) and callables (macros, global functions, bound methods).
struct Value {
  enum class Type { Undefined, None, Bool, Int, Float, String, List, Dict, Function };
  Type type = Type::Undefined;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;                 // String; for Undefined: the name that was missing (or "")
  std::shared_ptr<List> list;    // List (lists and tuples alike)
  bool is_tuple = false;         // List: prints as (a, b)
  std::shared_ptr<Dict> dict;    // Dict (also namespace() objects)
  std::shared_ptr<Function> fn;  // Function

  static Value undefined(std::string name = "") {
    Value v;
    v.s = std::move(name);
    return v;
  }
  static Value none() { return of(Type::None); }
  static Value boolean(bool x) {
    Value v = of(Type::Bool);
    v.b = x;
    return v;
  }
  static Value integer(int64_t x) {
    Value v = of(Type::Int);
    v.i = x;
    return v;
  }
  static Value number(double x) {
    Value v = of(Type::Float);
    v.f = x;
    return v;
  }
  static Value string(std::string x) {
    Value v = of(Type::String);
    v.s = std::move(x);
    return v;
  }
  static Value make_list(List items = {});
  static Value make_tuple(List items) {
    Value v = make_list(std::move(items));
    v.is_tuple = true;
    return v;
  }
  static Value make_dict();
  static Value function(Function fn);
  static Value from_json(const nlohmann::ordered_json& j);

  bool is_undefined() const { return type == Type::Undefined; }
  bool is_none() const { return type == Type::None; }
  bool is_string() const { return type == Type::String; }
  bool is_number() const { return type == Type::Int || type == Type::Float; }
  bool is_list() const { return type == Type::List; }
  bool is_dict() const { return type == Type::Dict; }
  double as_double() const { return type == Type::Int ? static_cast<double>(i) : f; }

  /// Python truthiness.
  bool truthy() const;
  /// What {{ value }} prints (str(value); Undefined prints nothing).
  std::string str() const;
  /// Python repr() (used inside lists/dicts and by the string filter of containers).
  std::string repr() const;
  /// JSON text like Python's json.dumps(ensure_ascii=False); indent < 0: one line.
  std::string to_json(int indent = -1) const;
  /// Type name for error messages.
  std::string type_name() const;

 private:
  static Value of(Type t) {
    Value v;
    v.type = t;
    return v;
  }
};

/// Insertion-ordered string-keyed dictionary.
struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  bool is_namespace = false;
  const Value* find(const std::string& key) const;
  void set(const std::string& key, Value v);
};

/// Arguments of a call: positional then keyword.
struct CallArgs {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
  /// Positional argument i, else keyword `name`, else `def`.
  Value get(size_t i, const std::string& name, Value def = Value::undefined()) const;
};

// ------------------------------------------------------------------------------------------------
// Limits of one render. A chat template renders a prompt (kilobytes to a few megabytes); these turn
// a runaway template into a perfx::Error instead of a stack overflow, minutes of work or an
// out-of-memory (found by fuzz_chat_template and its reviews).

/// How deep a value may nest: a value stored in a variable or namespace attribute may hold at most
/// kMaxValueDepth levels of lists and dicts; printing (str/repr/tojson), == and < stop at twice
/// that (a namespace can hold itself, `{% set ns.me = ns %}`, or a chain of others).
inline constexpr int kMaxValueDepth = 256;
/// The longest string a template may build, the rendered prompt included (16 MiB).
inline constexpr size_t kMaxStringBytes = size_t{1} << 24;
/// The longest list a repetition or concatenation may build (a Value is ~120 bytes: 120 MiB).
inline constexpr size_t kMaxListItems = size_t{1} << 20;

/// Containers one print, == or < may visit (a value whose parts are shared can stand for far more
/// than it holds: 60 times `{% set ns.x = [ns.x, ns.x] %}` is 2^60 leaves).
inline constexpr int64_t kMaxWalkNodes = int64_t{1} << 22;

/// Throws perfx::Error ("<what> would be longer than N bytes") when n is larger than
/// kMaxStringBytes (fail(): `line` 0 leaves out the line).
void check_size(size_t n, const std::string& what, int line);
/// The same for a list of n items against kMaxListItems.
void check_items(size_t n, const std::string& what, int line);
/// Adds `units` to the work of the render in progress on this thread (ChatTemplateInputs::max_work
/// says what a unit is); throws perfx::Error past the render's budget. Outside a render
/// (RenderBudget) it does nothing.
void charge_work(int64_t units, int line);

/// Opens a work budget of `max_work` units on this thread for its lifetime (renders do not nest).
class RenderBudget {
 public:
  explicit RenderBudget(int64_t max_work);
  ~RenderBudget();
  RenderBudget(const RenderBudget&) = delete;
  RenderBudget& operator=(const RenderBudget&) = delete;
};

/// Python ==. Throws perfx::Error past 2 * kMaxValueDepth levels or kMaxWalkNodes containers.
bool equals(const Value& a, const Value& b);
/// Python <; throws perfx::Error for unorderable types and as equals() does.
bool less(const Value& a, const Value& b);
/// Converts a string to code points and back (lengths, indexing and slicing count characters).
std::u32string to_u32(const std::string& s);
std::string from_u32(const std::u32string& s);

// ------------------------------------------------------------------------------------------------
// Lexer

struct Token {
  enum class Kind { Name, String, Int, Float, Op, End };
  Kind kind = Kind::End;
  std::string text;  // name, operator, or the decoded string literal
  int64_t i = 0;
  double f = 0;
  int line = 1;
};

/// One piece of template source: literal text, {{ expression }} or {% statement %}.
struct Segment {
  enum class Kind { Text, Expr, Stmt };
  Kind kind = Kind::Text;
  std::string text;           // Text only
  std::vector<Token> tokens;  // Expr / Stmt (ends with an End token)
  int line = 1;
};

/// Splits template source into segments, applying whitespace control ({%- -%}, trim_blocks,
/// lstrip_blocks) and {% raw %}. Throws perfx::Error for an unterminated tag or string.
std::vector<Segment> lex(const std::string& source);

// ------------------------------------------------------------------------------------------------
// Syntax tree

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    Literal,  // value
    Name,     // name
    List,     // items
    Tuple,    // items
    Dict,     // keys/items pairs: items[2k] key, items[2k+1] value
    Attr,     // a.name
    Index,    // a[b]
    Slice,    // a[b:c:d] (items: start, stop, step; null when omitted)
    Call,     // a(args, kw)
    Filter,   // a | name(args, kw)   (a null for filter blocks' placeholder)
    Test,     // a is [not] name(args)
    Unary,    // op a  (op: "not", "-", "+")
    Binary,   // a op b
    Cond,     // b if a else c  (a: condition, b: then, c: else or null)
    Compare,  // items[0] ops[0] items[1] ops[1] items[2] ...  (chained comparison)
  };
  Kind kind;
  int line = 1;
  Value value;
  std::string name;      // Name/Attr/Filter/Test name, or operator
  bool negated = false;  // Test: "is not"
  ExprPtr a, b, c;
  std::vector<ExprPtr> items;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;  // Compare

  Expr(Kind k, int ln) : kind(k), line(ln) {}
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

struct Node {
  enum class Kind {
    Text,         // text
    Output,       // {{ expr }}
    If,           // branches: (cond, body)...; else_body
    For,          // targets in iter [if filter] body [else else_body]
    Set,          // targets/attr = expr, or block set (body)
    Macro,        // name(params) body
    FilterBlock,  // {% filter f %} body {% endfilter %}  (expr: Filter with null a)
    Break,
    Continue,
    Do,          // {% do expr %}
    Generation,  // {% generation %} body {% endgeneration %}
  };
  Kind kind;
  int line = 1;
  std::string text;
  ExprPtr expr;                                    // Output, Set value, For iter, Do, FilterBlock
  ExprPtr filter;                                  // For: the inline "if" filter
  std::vector<std::string> targets;                // For / Set names; Set "ns.attr": {"ns", "attr"}
  bool attr_target = false;                        // Set: ns.attr = ...
  std::vector<std::pair<ExprPtr, Body>> branches;  // If
  Body body;                                       // For / Set block / Macro / Filter / Generation
  Body else_body;                                  // If / For
  std::vector<std::pair<std::string, ExprPtr>> params;  // Macro (default may be null)

  Node(Kind k, int ln) : kind(k), line(ln) {}
};

/// Parses segments into a tree. Throws perfx::Error "chat template: ... at line N".
Body parse(const std::vector<Segment>& segments);

// ------------------------------------------------------------------------------------------------
// Evaluation

/// Renders the tree with the given top-level variables.
std::string render(const Body& tree, const Dict& globals, int64_t max_work);

/// Applies the filter `name` (chat_template_builtins.cpp). Throws for an unknown filter.
Value apply_filter(const std::string& name, const Value& v, CallArgs& args, int line);
/// Applies the test `name`. Throws for an unknown test.
bool apply_test(const std::string& name, const Value& v, CallArgs& args, int line);
/// Calls method `name` of a string/list/dict. Throws for an unknown method.
Value call_method(const Value& self, const std::string& name, CallArgs& args, int line);
/// The global functions (range, namespace, raise_exception, strftime_now, dict) as values.
void add_global_functions(Dict& globals);

/// Throws perfx::Error("chat template: <msg> at line <line>"); line 0 (not known) leaves it out.
[[noreturn]] void fail(const std::string& msg, int line);

}  // namespace perfx::jinja
