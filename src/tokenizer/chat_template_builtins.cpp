// Chat template built-ins: filters, tests, methods of strings/lists/dicts (Python semantics), and
// the global functions (range, namespace, raise_exception, strftime_now, dict).
#include <algorithm>
#include <cctype>
#include <cmath>
#include <ctime>

#include "perfx/status.h"
#include "tokenizer/chat_template_internal.h"

namespace perfx::jinja {
namespace {

bool is_py_space(char32_t c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f' || c == 0x1c ||
         c == 0x1d || c == 0x1e || c == 0x1f || c == 0x85 || c == 0xa0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f ||
         c == 0x3000;
}

// Python str.strip/lstrip/rstrip: chars undefined/none = whitespace.
std::string strip(const std::string& s, const Value& chars, bool left, bool right) {
  std::u32string u = to_u32(s);
  std::u32string set;
  bool ws = chars.is_undefined() || chars.is_none();
  if (!ws) set = to_u32(chars.str());
  auto drop = [&](char32_t c) { return ws ? is_py_space(c) : set.find(c) != std::u32string::npos; };
  size_t b = 0, e = u.size();
  if (left)
    while (b < e && drop(u[b])) ++b;
  if (right)
    while (e > b && drop(u[e - 1])) --e;
  return from_u32(u.substr(b, e - b));
}

List split(const std::string& s, const Value& sep, int64_t maxsplit) {
  List out;
  if (sep.is_undefined() || sep.is_none()) {  // runs of whitespace, no empty strings
    std::u32string u = to_u32(s);
    size_t k = 0;
    while (true) {
      while (k < u.size() && is_py_space(u[k])) ++k;
      if (k >= u.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
        size_t e = u.size();
        while (e > k && is_py_space(u[e - 1])) --e;
        out.push_back(Value::string(from_u32(u.substr(k, e - k))));
        break;
      }
      size_t e = k;
      while (e < u.size() && !is_py_space(u[e])) ++e;
      out.push_back(Value::string(from_u32(u.substr(k, e - k))));
      k = e;
    }
    return out;
  }
  std::string d = sep.str();
  if (d.empty()) throw Error("chat template: split() with an empty separator");
  size_t k = 0;
  while (true) {
    size_t p = s.find(d, k);
    if (p == std::string::npos || (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit)) {
      out.push_back(Value::string(s.substr(k)));
      break;
    }
    out.push_back(Value::string(s.substr(k, p - k)));
    k = p + d.size();
  }
  return out;
}

std::string replace_all(const std::string& s, const std::string& from, const std::string& to,
                        int64_t count, int line) {
  std::string out;
  auto grow = [&](const std::string& piece) {
    check_size(out.size() + piece.size(), "the result of replace", line);
    out += piece;
  };
  if (from.empty()) {
    std::u32string u = to_u32(s);
    grow(to);
    int64_t n = 1;
    for (char32_t c : u) {
      grow(from_u32(std::u32string(1, c)));
      if (count < 0 || n < count) {
        grow(to);
        ++n;
      }
    }
    charge_work(static_cast<int64_t>(out.size() / 256), line);
    return out;
  }
  size_t k = 0;
  int64_t n = 0;
  while (true) {
    size_t p = s.find(from, k);
    if (p == std::string::npos || (count >= 0 && n >= count)) {
      grow(s.substr(k));
      charge_work(static_cast<int64_t>(out.size() / 256), line);
      return out;
    }
    grow(s.substr(k, p - k));
    grow(to);
    k = p + from.size();
    ++n;
  }
}

std::string ascii_lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}
std::string ascii_upper(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}
std::string capitalize(const std::string& s) {
  std::string out = ascii_lower(s);
  if (!out.empty()) out[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(out[0])));
  return out;
}
std::string title(const std::string& s) {
  std::string out = s;
  bool start = true;
  for (auto& c : out) {
    unsigned char u = static_cast<unsigned char>(c);
    if (std::isalpha(u)) {
      c = static_cast<char>(start ? std::toupper(u) : std::tolower(u));
      start = false;
    } else {
      start = !(std::isdigit(u) || u >= 0x80 || c == '\'');
    }
  }
  return out;
}

int64_t length(const Value& v, int line) {
  switch (v.type) {
    case Value::Type::String:
      return static_cast<int64_t>(to_u32(v.s).size());
    case Value::Type::List:
      return static_cast<int64_t>(v.list->size());
    case Value::Type::Dict:
      return static_cast<int64_t>(v.dict->items.size());
    case Value::Type::Undefined:
      return 0;
    default:
      fail("object of type " + v.type_name() + " has no length", line);
  }
}

List as_list(const Value& v, int line) {
  charge_work(static_cast<int64_t>(v.is_list() ? v.list->size() / 16 : 0), line);
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
      charge_work(static_cast<int64_t>(u.size() / 16), line);
      List chars;
      for (char32_t c : u) chars.push_back(Value::string(from_u32(std::u32string(1, c))));
      return chars;
    }
    case Value::Type::Undefined:
      return {};
    default:
      fail("cannot convert " + v.type_name() + " to a list", line);
  }
}

// Attribute lookup for filters with attribute= (dotted paths allowed).
Value attr_path(const Value& v, const std::string& path) {
  Value cur = v;
  size_t k = 0;
  while (k <= path.size()) {
    size_t dot = path.find('.', k);
    std::string part = path.substr(k, dot == std::string::npos ? std::string::npos : dot - k);
    if (cur.is_dict()) {
      const Value* x = cur.dict->find(part);
      cur = x ? *x : Value::undefined(part);
    } else if (cur.is_list() && !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit)) {
      size_t idx = std::stoul(part);
      cur = idx < cur.list->size() ? (*cur.list)[idx] : Value::undefined();
    } else {
      return Value::undefined(part);
    }
    if (dot == std::string::npos) break;
    k = dot + 1;
  }
  return cur;
}

Value to_int(const Value& v, const Value& def) {
  switch (v.type) {
    case Value::Type::Int:
      return v;
    case Value::Type::Bool:
      return Value::integer(v.b ? 1 : 0);
    case Value::Type::Float:
      return Value::integer(static_cast<int64_t>(v.f));
    case Value::Type::String: {
      try {
        size_t used = 0;
        std::string t = strip(v.s, Value::undefined(), true, true);
        double d = std::stod(t, &used);
        if (used == t.size()) return Value::integer(static_cast<int64_t>(d));
      } catch (...) {
      }
      return def.is_undefined() ? Value::integer(0) : def;
    }
    default:
      return def.is_undefined() ? Value::integer(0) : def;
  }
}

Value to_float(const Value& v, const Value& def) {
  switch (v.type) {
    case Value::Type::Int:
      return Value::number(static_cast<double>(v.i));
    case Value::Type::Float:
      return v;
    case Value::Type::Bool:
      return Value::number(v.b ? 1 : 0);
    case Value::Type::String:
      try {
        size_t used = 0;
        std::string t = strip(v.s, Value::undefined(), true, true);
        double d = std::stod(t, &used);
        if (used == t.size()) return Value::number(d);
      } catch (...) {
      }
      return def.is_undefined() ? Value::number(0) : def;
    default:
      return def.is_undefined() ? Value::number(0) : def;
  }
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// select/reject/selectattr/rejectattr share this.
Value select_items(const Value& v, CallArgs& args, bool by_attr, bool keep, int line) {
  List out;
  size_t k = 0;
  std::string attr;
  if (by_attr) {
    Value a = args.get(0, "attribute");
    if (!a.is_string()) fail("selectattr/rejectattr need an attribute name", line);
    attr = a.s;
    k = 1;
  }
  std::string test = k < args.pos.size() ? args.pos[k].str() : "";
  CallArgs targs;
  for (size_t m = k + 1; m < args.pos.size(); ++m) targs.pos.push_back(args.pos[m]);
  for (const auto& item : as_list(v, line)) {
    Value x = by_attr ? attr_path(item, attr) : item;
    bool ok = test.empty() ? x.truthy() : apply_test(test, x, targs, line);
    if (ok == keep) out.push_back(item);
  }
  return Value::make_list(std::move(out));
}

}  // namespace

Value apply_filter(const std::string& name, const Value& v, CallArgs& args, int line) {
  if (name == "trim" || name == "strip")
    return Value::string(strip(v.str(), args.get(0, "chars"), true, true));
  if (name == "length" || name == "count") return Value::integer(length(v, line));
  if (name == "tojson") {
    Value ind = args.get(0, "indent");
    if (ind.type == Value::Type::Int && (ind.i < 0 || ind.i > 1024))
      fail("tojson indent must be in [0, 1024] (got " + std::to_string(ind.i) + ")", line);
    return Value::string(v.to_json(ind.type == Value::Type::Int ? static_cast<int>(ind.i) : -1));
  }
  if (name == "string") return Value::string(v.str());
  if (name == "safe") return v;
  if (name == "upper") return Value::string(ascii_upper(v.str()));
  if (name == "lower") return Value::string(ascii_lower(v.str()));
  if (name == "capitalize") return Value::string(capitalize(v.str()));
  if (name == "title") return Value::string(title(v.str()));
  if (name == "default" || name == "d") {
    Value def = args.get(0, "default_value", Value::string(""));
    bool boolean = args.get(1, "boolean", Value::boolean(false)).truthy();
    if (v.is_undefined() || (boolean && !v.truthy())) return def;
    return v;
  }
  if (name == "first" || name == "last") {
    List items = as_list(v, line);
    if (items.empty()) return Value::undefined();
    return name == "first" ? items.front() : items.back();
  }
  if (name == "join") {
    std::string sep = args.get(0, "d", Value::string("")).str();
    Value attr = args.get(1, "attribute");
    std::string out;
    bool first = true;
    for (const auto& item : as_list(v, line)) {
      const std::string piece = (attr.is_string() ? attr_path(item, attr.s) : item).str();
      check_size(out.size() + sep.size() + piece.size(), "the result of join", line);
      if (!first) out += sep;
      first = false;
      out += piece;
    }
    charge_work(static_cast<int64_t>(out.size() / 256), line);
    return Value::string(out);
  }
  if (name == "list") return Value::make_list(as_list(v, line));
  if (name == "items") {
    if (v.is_undefined()) return Value::make_list();
    if (!v.is_dict()) fail("items filter needs a dict, not " + v.type_name(), line);
    List out;
    for (const auto& kv : v.dict->items)
      out.push_back(Value::make_tuple({Value::string(kv.first), kv.second}));
    return Value::make_list(std::move(out));
  }
  if (name == "dictsort") {
    if (!v.is_dict()) fail("dictsort filter needs a dict", line);
    List out;
    for (const auto& kv : v.dict->items)
      out.push_back(Value::make_tuple({Value::string(kv.first), kv.second}));
    std::stable_sort(out.begin(), out.end(), [](const Value& a, const Value& b) {
      return ascii_lower((*a.list)[0].s) < ascii_lower((*b.list)[0].s);
    });
    return Value::make_list(std::move(out));
  }
  if (name == "reverse") {
    if (v.is_string()) {
      std::u32string u = to_u32(v.s);
      std::reverse(u.begin(), u.end());
      return Value::string(from_u32(u));
    }
    List items = as_list(v, line);
    std::reverse(items.begin(), items.end());
    return Value::make_list(std::move(items));
  }
  if (name == "sort") {
    List items = as_list(v, line);
    bool rev = args.get(0, "reverse", Value::boolean(false)).truthy();
    Value attr = args.get(2, "attribute");
    auto key = [&](const Value& x) { return attr.is_string() ? attr_path(x, attr.s) : x; };
    std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
      return rev ? less(key(b), key(a)) : less(key(a), key(b));
    });
    return Value::make_list(std::move(items));
  }
  if (name == "unique") {
    List out;
    for (const auto& item : as_list(v, line)) {
      bool seen = false;
      for (const auto& o : out) seen = seen || equals(o, item);
      if (!seen) out.push_back(item);
    }
    return Value::make_list(std::move(out));
  }
  if (name == "min" || name == "max") {
    List items = as_list(v, line);
    if (items.empty()) return Value::undefined();
    Value best = items[0];
    for (const auto& x : items)
      if (name == "min" ? less(x, best) : less(best, x)) best = x;
    return best;
  }
  if (name == "sum") {
    Value total = Value::integer(0);
    for (const auto& x : as_list(v, line)) {
      if (x.type == Value::Type::Float || total.type == Value::Type::Float)
        total = Value::number(total.as_double() + x.as_double());
      else
        total = Value::integer(total.i + x.i);
    }
    return total;
  }
  if (name == "map") {
    Value attr = args.get(99, "attribute");
    List out;
    if (attr.is_string()) {
      Value def = args.get(99, "default");
      for (const auto& item : as_list(v, line)) {
        Value x = attr_path(item, attr.s);
        out.push_back(x.is_undefined() && !def.is_undefined() ? def : x);
      }
    } else {
      if (args.pos.empty() || !args.pos[0].is_string())
        fail("map needs a filter name or attribute=", line);
      CallArgs rest;
      for (size_t k = 1; k < args.pos.size(); ++k) rest.pos.push_back(args.pos[k]);
      for (const auto& item : as_list(v, line)) {
        CallArgs a = rest;
        out.push_back(apply_filter(args.pos[0].s, item, a, line));
      }
    }
    return Value::make_list(std::move(out));
  }
  if (name == "select") return select_items(v, args, false, true, line);
  if (name == "reject") return select_items(v, args, false, false, line);
  if (name == "selectattr") return select_items(v, args, true, true, line);
  if (name == "rejectattr") return select_items(v, args, true, false, line);
  if (name == "replace") {
    int64_t count = args.get(2, "count", Value::integer(-1)).i;
    return Value::string(
        replace_all(v.str(), args.get(0, "old").str(), args.get(1, "new").str(), count, line));
  }
  if (name == "int") return to_int(v, args.get(0, "default"));
  if (name == "float") return to_float(v, args.get(0, "default"));
  if (name == "abs") {
    if (v.type == Value::Type::Int) return Value::integer(v.i < 0 ? -v.i : v.i);
    if (v.type == Value::Type::Float) return Value::number(std::fabs(v.f));
    fail("abs needs a number", line);
  }
  if (name == "round") {
    int64_t prec = args.get(0, "precision", Value::integer(0)).i;
    std::string method = args.get(1, "method", Value::string("common")).str();
    double scale = std::pow(10.0, static_cast<double>(prec));
    double x = v.as_double() * scale;
    double r = method == "floor" ? std::floor(x) : method == "ceil" ? std::ceil(x) : std::round(x);
    return Value::number(r / scale);
  }
  if (name == "escape" || name == "e") return Value::string(html_escape(v.str()));
  if (name == "indent") {
    int64_t width = args.get(0, "width", Value::integer(4)).i;
    bool first = args.get(1, "first", Value::boolean(false)).truthy();
    bool blank = args.get(2, "blank", Value::boolean(false)).truthy();
    check_size(static_cast<size_t>(std::max<int64_t>(width, 0)), "the indent width", line);
    std::string pad(static_cast<size_t>(std::max<int64_t>(width, 0)), ' ');
    std::string s = v.str(), out;
    size_t k = 0;
    bool line_start = true, is_first = true;
    while (k <= s.size()) {
      size_t nl = s.find('\n', k);
      std::string ln = s.substr(k, nl == std::string::npos ? std::string::npos : nl - k);
      check_size(out.size() + pad.size() + ln.size() + 1, "the result of indent", line);
      if (line_start && (!is_first || first) && (blank || !ln.empty())) out += pad;
      out += ln;
      if (nl == std::string::npos) break;
      out += '\n';
      k = nl + 1;
      is_first = false;
    }
    charge_work(static_cast<int64_t>(out.size() / 256), line);
    return Value::string(out);
  }
  if (name == "wordcount")
    return Value::integer(static_cast<int64_t>(split(v.str(), Value::undefined(), -1).size()));
  fail("unsupported filter '" + name + "'", line);
}

bool apply_test(const std::string& name, const Value& v, CallArgs& args, int line) {
  using T = Value::Type;
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "boolean") return v.type == T::Bool;
  if (name == "true") return v.type == T::Bool && v.b;
  if (name == "false") return v.type == T::Bool && !v.b;
  if (name == "integer") return v.type == T::Int;
  if (name == "float") return v.type == T::Float;
  if (name == "number") return v.type == T::Int || v.type == T::Float || v.type == T::Bool;
  if (name == "string") return v.type == T::String;
  if (name == "mapping") return v.type == T::Dict;
  if (name == "iterable") return v.type == T::List || v.type == T::Dict || v.type == T::String;
  if (name == "sequence") return v.type == T::List || v.type == T::Dict || v.type == T::String;
  if (name == "callable") return v.type == T::Function;
  if (name == "lower") return v.is_string() && ascii_lower(v.s) == v.s;
  if (name == "upper") return v.is_string() && ascii_upper(v.s) == v.s;
  if (name == "odd" || name == "even") {
    if (v.type != T::Int) fail("test '" + name + "' needs an integer", line);
    return ((v.i % 2) != 0) == (name == "odd");
  }
  if (name == "divisibleby") {
    Value d = args.get(0, "num");
    if (v.type != T::Int || d.type != T::Int || d.i == 0) fail("divisibleby needs integers", line);
    return v.i % d.i == 0;
  }
  Value other = args.get(0, "b");
  if (name == "eq" || name == "equalto" || name == "==") return equals(v, other);
  if (name == "ne" || name == "!=") return !equals(v, other);
  if (name == "sameas") return equals(v, other) && v.type == other.type;
  if (name == "lt" || name == "lessthan" || name == "<") return less(v, other);
  if (name == "gt" || name == "greaterthan" || name == ">") return less(other, v);
  if (name == "le" || name == "<=") return !less(other, v);
  if (name == "ge" || name == ">=") return !less(v, other);
  if (name == "in") {
    if (other.is_list()) {
      for (const auto& x : *other.list)
        if (equals(v, x)) return true;
      return false;
    }
    if (other.is_string() && v.is_string()) return other.s.find(v.s) != std::string::npos;
    if (other.is_dict() && v.is_string()) return other.dict->find(v.s) != nullptr;
    return false;
  }
  fail("unsupported test '" + name + "'", line);
}

Value call_method(const Value& self, const std::string& name, CallArgs& args, int line) {
  if (self.is_string()) {
    const std::string& s = self.s;
    if (name == "strip") return Value::string(strip(s, args.get(0, "chars"), true, true));
    if (name == "lstrip") return Value::string(strip(s, args.get(0, "chars"), true, false));
    if (name == "rstrip") return Value::string(strip(s, args.get(0, "chars"), false, true));
    if (name == "split") {
      Value mx = args.get(1, "maxsplit", Value::integer(-1));
      return Value::make_list(split(s, args.get(0, "sep"), mx.i));
    }
    if (name == "startswith" || name == "endswith") {
      Value p = args.get(0, "prefix");
      List cands = p.is_list() ? *p.list : List{p};
      for (const auto& c : cands) {
        if (!c.is_string()) fail(name + "() needs a string", line);
        if (name == "startswith" ? s.rfind(c.s, 0) == 0
                                 : (s.size() >= c.s.size() &&
                                    s.compare(s.size() - c.s.size(), c.s.size(), c.s) == 0))
          return Value::boolean(true);
      }
      return Value::boolean(false);
    }
    if (name == "upper") return Value::string(ascii_upper(s));
    if (name == "lower") return Value::string(ascii_lower(s));
    if (name == "title") return Value::string(title(s));
    if (name == "capitalize") return Value::string(capitalize(s));
    if (name == "replace") {
      int64_t count = args.get(2, "count", Value::integer(-1)).i;
      return Value::string(
          replace_all(s, args.get(0, "old").str(), args.get(1, "new").str(), count, line));
    }
    if (name == "find" || name == "index" || name == "count") {
      std::string sub = args.get(0, "sub").str();
      if (name == "count") {
        if (sub.empty()) return Value::integer(static_cast<int64_t>(to_u32(s).size()) + 1);
        int64_t n = 0;
        for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
        return Value::integer(n);
      }
      size_t p = s.find(sub);
      if (p == std::string::npos) {
        if (name == "index") fail("substring not found", line);
        return Value::integer(-1);
      }
      return Value::integer(static_cast<int64_t>(to_u32(s.substr(0, p)).size()));
    }
    if (name == "join") {
      std::string out;
      bool first = true;
      for (const auto& x : as_list(args.get(0, "iterable"), line)) {
        const std::string piece = x.str();
        check_size(out.size() + s.size() + piece.size(), "the result of join", line);
        if (!first) out += s;
        first = false;
        out += piece;
      }
      charge_work(static_cast<int64_t>(out.size() / 256), line);
      return Value::string(out);
    }
    if (name == "splitlines") {
      List out;
      size_t k = 0;
      while (k < s.size()) {
        size_t nl = s.find_first_of("\r\n", k);
        if (nl == std::string::npos) {
          out.push_back(Value::string(s.substr(k)));
          break;
        }
        out.push_back(Value::string(s.substr(k, nl - k)));
        k = nl + ((s[nl] == '\r' && nl + 1 < s.size() && s[nl + 1] == '\n') ? 2 : 1);
      }
      return Value::make_list(std::move(out));
    }
    if (name == "isspace" || name == "isdigit" || name == "isalpha" || name == "isalnum") {
      if (s.empty()) return Value::boolean(false);
      for (unsigned char c : s) {
        bool ok = name == "isspace"   ? std::isspace(c) != 0
                  : name == "isdigit" ? std::isdigit(c) != 0
                  : name == "isalpha" ? std::isalpha(c) != 0
                                      : std::isalnum(c) != 0;
        if (!ok) return Value::boolean(false);
      }
      return Value::boolean(true);
    }
  } else if (self.is_dict()) {
    if (name == "items") return apply_filter("items", self, args, line);
    if (name == "keys") return Value::make_list(as_list(self, line));
    if (name == "values") {
      List out;
      for (const auto& kv : self.dict->items) out.push_back(kv.second);
      return Value::make_list(std::move(out));
    }
    if (name == "get") {
      Value key = args.get(0, "key");
      const Value* x = self.dict->find(key.str());
      return x ? *x : args.get(1, "default", Value::none());
    }
  } else if (self.is_list()) {
    if (name == "index") {
      Value x = args.get(0, "value");
      for (size_t k = 0; k < self.list->size(); ++k)
        if (equals((*self.list)[k], x)) return Value::integer(static_cast<int64_t>(k));
      fail("value not in list", line);
    }
    if (name == "count") {
      Value x = args.get(0, "value");
      int64_t n = 0;
      for (const auto& e : *self.list) n += equals(e, x) ? 1 : 0;
      return Value::integer(n);
    }
    if (name == "append" || name == "pop" || name == "extend" || name == "insert")
      fail("unsupported method '" + name + "' (lists are immutable in chat templates)", line);
  } else if (self.is_undefined()) {
    fail("cannot call method '" + name + "' of an undefined value" +
             (self.s.empty() ? "" : " ('" + self.s + "')"),
         line);
  }
  fail("unsupported method '" + name + "' of " + self.type_name(), line);
}

void add_global_functions(Dict& globals) {
  globals.set("raise_exception", Value::function([](CallArgs& a) -> Value {
                throw Error("chat template raised: " + a.get(0, "message").str());
              }));
  globals.set("namespace", Value::function([](CallArgs& a) {
                Value ns = Value::make_dict();
                ns.dict->is_namespace = true;
                if (!a.pos.empty() && a.pos[0].is_dict())
                  for (const auto& kv : a.pos[0].dict->items) ns.dict->set(kv.first, kv.second);
                for (const auto& kv : a.kw) ns.dict->set(kv.first, kv.second);
                return ns;
              }));
  globals.set("dict", Value::function([](CallArgs& a) {
                Value d = Value::make_dict();
                for (const auto& kv : a.kw) d.dict->set(kv.first, kv.second);
                return d;
              }));
  globals.set("range", Value::function([](CallArgs& a) {
                int64_t start = 0, stop = 0, step = 1;
                if (a.pos.size() == 1) {
                  stop = a.pos[0].i;
                } else if (a.pos.size() >= 2) {
                  start = a.pos[0].i;
                  stop = a.pos[1].i;
                  if (a.pos.size() >= 3) step = a.pos[2].i;
                }
                if (step == 0) throw Error("chat template: range() step must not be zero");
                List out;
                for (int64_t k = start; step > 0 ? k < stop : k > stop;) {
                  out.push_back(Value::integer(k));
                  if (out.size() > 1000000) throw Error("chat template: range() too large");
                  if (__builtin_add_overflow(k, step, &k)) break;  // past INT64_MAX/MIN: done
                }
                return Value::make_list(std::move(out));
              }));
  globals.set("strftime_now", Value::function([](CallArgs& a) {
                std::time_t t = std::time(nullptr);
                std::tm tm{};
                localtime_r(&t, &tm);
                char buf[256];
                size_t n = std::strftime(buf, sizeof buf, a.get(0, "format").str().c_str(), &tm);
                return Value::string(std::string(buf, n));
              }));
}

}  // namespace perfx::jinja
