// Chat template values: construction from JSON, Python truthiness/str/repr, JSON output,
// comparison, and UTF-8 <-> code point conversion.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "perfx/status.h"
#include "tokenizer/chat_template_internal.h"

namespace perfx::jinja {

void fail(const std::string& msg, int line) {
  throw Error("chat template: " + msg + (line > 0 ? " at line " + std::to_string(line) : ""));
}

namespace {

// The work of the render in progress on this thread and its budget; t_work -1 outside a render.
thread_local int64_t t_work = -1;
thread_local int64_t t_max_work = 0;
// The nesting of the recursive value walks below on this thread, and the containers the
// outermost walk in progress has visited (kMaxValueDepth, kMaxWalkNodes).
thread_local int t_walk_depth = 0;
thread_local int64_t t_walk_nodes = 0;

class WalkDepth {
 public:
  WalkDepth() {
    if (t_walk_depth == 0) t_walk_nodes = 0;
    if (++t_walk_nodes > kMaxWalkNodes)
      throw Error("chat template: a value too large to print or compare (over " +
                  std::to_string(kMaxWalkNodes) + " lists and dicts)");
    if (t_walk_depth >= 2 * kMaxValueDepth)
      throw Error("chat template: a value nested more than " + std::to_string(2 * kMaxValueDepth) +
                  " levels deep to print or compare (a namespace that contains itself?)");
    ++t_walk_depth;
  }
  ~WalkDepth() { --t_walk_depth; }
  WalkDepth(const WalkDepth&) = delete;
  WalkDepth& operator=(const WalkDepth&) = delete;
};

}  // namespace

namespace {

void size_error(const std::string& what, size_t limit, const char* unit, int line) {
  fail(what + " would be longer than " + std::to_string(limit) + unit, line);
}

}  // namespace

void check_size(size_t n, const std::string& what, int line) {
  if (n > kMaxStringBytes) size_error(what, kMaxStringBytes, " bytes", line);
}

void check_items(size_t n, const std::string& what, int line) {
  if (n > kMaxListItems) size_error(what, kMaxListItems, " items", line);
}

void charge_work(int64_t units, int line) {
  if (t_work < 0) return;
  t_work += units;
  if (t_work > t_max_work)
    fail("the template needs more than " + std::to_string(t_max_work) +
             " steps of work (a loop, recursion or string too large for a prompt)",
         line);
}

RenderBudget::RenderBudget(int64_t max_work) {
  t_work = 0;
  t_max_work = max_work;
}
RenderBudget::~RenderBudget() { t_work = -1; }

Value Value::make_list(List items) {
  Value v = of(Type::List);
  v.list = std::make_shared<List>(std::move(items));
  return v;
}

Value Value::make_dict() {
  Value v = of(Type::Dict);
  v.dict = std::make_shared<Dict>();
  return v;
}

Value Value::function(Function fn) {
  Value v = of(Type::Function);
  v.fn = std::make_shared<Function>(std::move(fn));
  return v;
}

Value Value::from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return none();
    case nlohmann::ordered_json::value_t::boolean:
      return boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return integer(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned:
      return integer(static_cast<int64_t>(j.get<uint64_t>()));
    case nlohmann::ordered_json::value_t::number_float:
      return number(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return string(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      List items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(from_json(e));
      return make_list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Value d = make_dict();
      for (auto it = j.begin(); it != j.end(); ++it) d.dict->set(it.key(), from_json(it.value()));
      return d;
    }
    default:
      return undefined();
  }
}

const Value* Dict::find(const std::string& key) const {
  for (const auto& kv : items)
    if (kv.first == key) return &kv.second;
  return nullptr;
}

void Dict::set(const std::string& key, Value v) {
  for (auto& kv : items) {
    if (kv.first == key) {
      kv.second = std::move(v);
      return;
    }
  }
  items.emplace_back(key, std::move(v));
}

Value CallArgs::get(size_t idx, const std::string& name, Value def) const {
  if (idx < pos.size()) return pos[idx];
  for (const auto& kv : kw)
    if (kv.first == name) return kv.second;
  return def;
}

bool Value::truthy() const {
  switch (type) {
    case Type::Undefined:
    case Type::None:
      return false;
    case Type::Bool:
      return b;
    case Type::Int:
      return i != 0;
    case Type::Float:
      return f != 0.0;
    case Type::String:
      return !s.empty();
    case Type::List:
      return !list->empty();
    case Type::Dict:
      return !dict->items.empty();
    case Type::Function:
      return true;
  }
  return false;
}

namespace {

// Python's float repr: the shortest digits that read back to the same double.
std::string float_repr(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  if (x == 0) return std::signbit(x) ? "-0.0" : "0.0";
  char buf[64];
  int prec = 1;
  for (; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof buf, "%.*e", prec - 1, x);
    if (std::strtod(buf, nullptr) == x) break;
  }
  // buf = "-d.ddddde[+-]XX"
  std::string m(buf);
  bool neg = m[0] == '-';
  if (neg) m.erase(0, 1);
  size_t epos = m.find('e');
  int exp = std::atoi(m.c_str() + epos + 1);
  std::string digits;
  for (size_t k = 0; k < epos; ++k)
    if (m[k] != '.') digits += m[k];
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  std::string out;
  if (exp >= -4 && exp < 16) {
    if (exp < 0) {
      out = "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
    } else if (static_cast<int>(digits.size()) <= exp + 1) {
      out = digits +
            std::string(static_cast<size_t>(exp + 1 - static_cast<int>(digits.size())), '0') + ".0";
    } else {
      out = digits.substr(0, static_cast<size_t>(exp + 1)) + "." +
            digits.substr(static_cast<size_t>(exp + 1));
    }
  } else {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out.append(".").append(digits, 1);
    char e[16];
    std::snprintf(e, sizeof e, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    out += e;
  }
  return neg ? "-" + out : out;
}

std::string string_repr(const std::string& s) {
  bool has_single = s.find('\'') != std::string::npos;
  bool has_double = s.find('"') != std::string::npos;
  char q = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, q);
  for (unsigned char c : s) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == static_cast<unsigned char>(q)) {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += q;
  return out;
}

void json_string(const std::string& s, std::string& out) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

void json_dump(const Value& v, int indent, int depth, std::string& out) {
  auto newline = [&](int d) {
    check_size(out.size() + 1 + static_cast<size_t>(indent) * static_cast<size_t>(d),
               "the tojson output", 0);
    out += '\n';
    out.append(static_cast<size_t>(indent) * static_cast<size_t>(d), ' ');
  };
  switch (v.type) {
    case Value::Type::Undefined:
    case Value::Type::None:
    case Value::Type::Function:
      out += "null";
      return;
    case Value::Type::Bool:
      out += v.b ? "true" : "false";
      return;
    case Value::Type::Int:
      out += std::to_string(v.i);
      return;
    case Value::Type::Float:
      if (std::isnan(v.f)) {
        out += "NaN";
      } else if (std::isinf(v.f)) {
        out += v.f > 0 ? "Infinity" : "-Infinity";
      } else {
        out += float_repr(v.f);
      }
      return;
    case Value::Type::String:
      json_string(v.s, out);
      return;
    case Value::Type::List: {
      if (v.list->empty()) {
        out += "[]";
        return;
      }
      WalkDepth guard;
      out += '[';
      bool first = true;
      for (const auto& e : *v.list) {
        check_size(out.size(), "the tojson output", 0);
        if (!first) out += indent >= 0 ? "," : ", ";
        first = false;
        if (indent >= 0) newline(depth + 1);
        json_dump(e, indent, depth + 1, out);
      }
      if (indent >= 0) newline(depth);
      out += ']';
      return;
    }
    case Value::Type::Dict: {
      if (v.dict->items.empty()) {
        out += "{}";
        return;
      }
      WalkDepth guard;
      out += '{';
      bool first = true;
      for (const auto& kv : v.dict->items) {
        check_size(out.size(), "the tojson output", 0);
        if (!first) out += indent >= 0 ? "," : ", ";
        first = false;
        if (indent >= 0) newline(depth + 1);
        json_string(kv.first, out);
        out += ": ";
        json_dump(kv.second, indent, depth + 1, out);
      }
      if (indent >= 0) newline(depth);
      out += '}';
      return;
    }
  }
}

}  // namespace

std::string Value::str() const {
  switch (type) {
    case Type::Undefined:
      return "";
    case Type::String:
      return s;
    default:
      return repr();
  }
}

std::string Value::repr() const {
  switch (type) {
    case Type::Undefined:
      return "";
    case Type::None:
      return "None";
    case Type::Bool:
      return b ? "True" : "False";
    case Type::Int:
      return std::to_string(i);
    case Type::Float:
      return float_repr(f);
    case Type::String:
      return string_repr(s);
    case Type::List: {
      WalkDepth guard;
      std::string out = is_tuple ? "(" : "[";
      for (size_t k = 0; k < list->size(); ++k) {
        check_size(out.size(), "the printed value", 0);
        if (k) out += ", ";
        out += (*list)[k].repr();
      }
      if (is_tuple && list->size() == 1) out += ",";
      check_size(out.size(), "the printed value", 0);
      return out + (is_tuple ? ")" : "]");
    }
    case Type::Dict: {
      WalkDepth guard;
      std::string out = "{";
      bool first = true;
      for (const auto& kv : dict->items) {
        check_size(out.size(), "the printed value", 0);
        if (!first) out += ", ";
        first = false;
        out += string_repr(kv.first) + ": " + kv.second.repr();
      }
      check_size(out.size(), "the printed value", 0);
      return out + "}";
    }
    case Type::Function:
      return "<function>";
  }
  return "";
}

std::string Value::to_json(int indent) const {
  std::string out;
  json_dump(*this, indent, 0, out);
  return out;
}

std::string Value::type_name() const {
  switch (type) {
    case Type::Undefined:
      return "undefined";
    case Type::None:
      return "none";
    case Type::Bool:
      return "bool";
    case Type::Int:
      return "int";
    case Type::Float:
      return "float";
    case Type::String:
      return "string";
    case Type::List:
      return "list";
    case Type::Dict:
      return "dict";
    case Type::Function:
      return "function";
  }
  return "?";
}

namespace {

bool equal_lists(const List& a, const List& b) {
  if (a.size() != b.size()) return false;
  for (size_t k = 0; k < a.size(); ++k)
    if (!equals(a[k], b[k])) return false;
  return true;
}

bool equal_dicts(const Dict& a, const Dict& b) {
  if (a.items.size() != b.items.size()) return false;
  for (const auto& kv : a.items) {
    const Value* o = b.find(kv.first);
    if (!o || !equals(kv.second, *o)) return false;
  }
  return true;
}

}  // namespace

bool equals(const Value& a, const Value& b) {
  using T = Value::Type;
  auto numeric = [](const Value& v) {
    return v.type == T::Int || v.type == T::Float || v.type == T::Bool;
  };
  if (numeric(a) && numeric(b)) {
    auto as_num = [](const Value& v) {
      return v.type == T::Bool ? (v.b ? 1.0 : 0.0) : v.as_double();
    };
    if (a.type == T::Int && b.type == T::Int) return a.i == b.i;
    return as_num(a) == as_num(b);
  }
  if (a.type != b.type) return false;
  if (a.type == T::List || a.type == T::Dict) {
    if (a.type == T::List ? a.list == b.list : a.dict == b.dict) return true;  // the same object
    WalkDepth guard;
    return a.type == T::List ? equal_lists(*a.list, *b.list) : equal_dicts(*a.dict, *b.dict);
  }
  switch (a.type) {
    case T::Undefined:
    case T::None:
      return true;
    case T::String:
      return a.s == b.s;
    case T::Function:
      return a.fn == b.fn;
    default:
      return false;
  }
}

namespace {

// Python's ordering as -1, 0 or 1 (one walk per list level, where a < b then b < a was two).
int compare3(const Value& a, const Value& b) {
  using T = Value::Type;
  auto numeric = [](const Value& v) {
    return v.type == T::Int || v.type == T::Float || v.type == T::Bool;
  };
  if (numeric(a) && numeric(b)) {
    if (a.type == T::Int && b.type == T::Int) return a.i < b.i ? -1 : a.i > b.i ? 1 : 0;
    auto as_num = [](const Value& v) {
      return v.type == T::Bool ? (v.b ? 1.0 : 0.0) : v.as_double();
    };
    const double x = as_num(a), y = as_num(b);
    return x < y ? -1 : y < x ? 1 : 0;  // NaN: neither less nor greater, as in Python
  }
  if (a.type == T::String && b.type == T::String) {  // UTF-8 keeps code point order
    const int c = a.s.compare(b.s);
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.type == T::List && b.type == T::List) {
    if (a.list == b.list) return 0;
    WalkDepth guard;
    const size_t n = std::min(a.list->size(), b.list->size());
    for (size_t k = 0; k < n; ++k) {
      const Value &x = (*a.list)[k], &y = (*b.list)[k];
      if (equals(x, y)) continue;  // Python compares the first unequal items
      return compare3(x, y);
    }
    return a.list->size() < b.list->size() ? -1 : a.list->size() > b.list->size() ? 1 : 0;
  }
  throw Error("chat template: cannot compare " + a.type_name() + " with " + b.type_name());
}

}  // namespace

bool less(const Value& a, const Value& b) { return compare3(a, b) < 0; }

std::u32string to_u32(const std::string& s) {
  std::u32string out;
  out.reserve(s.size());
  size_t k = 0;
  while (k < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[k]);
    int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || k + static_cast<size_t>(n) > s.size()) {  // invalid byte: keep it as is
      out += static_cast<char32_t>(0xDC00 + c);
      ++k;
      continue;
    }
    char32_t cp = n == 1 ? c : (c & (0x7F >> n));
    for (int m = 1; m < n; ++m) cp = (cp << 6) | (static_cast<unsigned char>(s[k + m]) & 0x3F);
    out += cp;
    k += static_cast<size_t>(n);
  }
  return out;
}

std::string from_u32(const std::u32string& s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t cp : s) {
    if (cp >= 0xDC80 && cp <= 0xDCFF) {  // an invalid byte kept by to_u32
      out += static_cast<char>(cp - 0xDC00);
    } else if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  return out;
}

}  // namespace perfx::jinja
