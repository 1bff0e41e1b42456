// Chat template parser: statements (if/for/set/macro/filter/break/continue/do/generation) and
// expressions with Jinja's precedence: conditional < or < and < not < comparison < + - < ~ <
// * / // % < ** < unary - + < postfix (.attr [index] (call)) with | filters and "is" tests.
#include <set>

#include "tokenizer/chat_template_internal.h"

namespace perfx::jinja {
namespace {

// How deep expressions and blocks may nest. The parser, the evaluator and the tree's destructor
// all recurse along it, so without a bound a template such as "{{ ((((...1)))) }}", "1+1+...+1"
// or thousands of nested {% if %} overflows the stack (found with fuzz_chat_template).
constexpr int kMaxNesting = 200;

class ExprParser {
 public:
  ExprParser(const std::vector<Token>& toks, size_t start) : t_(toks), p_(start) {}

  // Counts nesting while a parse function runs: more() at each level it adds (entering a
  // sub-expression, or each operator of a chain, which deepens the left-leaning tree).
  class Nest {
   public:
    explicit Nest(ExprParser& p) : p_(p) {}
    ~Nest() { p_.depth_ -= n_; }
    Nest(const Nest&) = delete;
    Nest& operator=(const Nest&) = delete;
    void more() {
      ++n_;
      if (++p_.depth_ > kMaxNesting)
        fail("expression nested more than " + std::to_string(kMaxNesting) + " levels deep",
             p_.peek().line);
    }

   private:
    ExprParser& p_;
    int n_ = 0;
  };

  size_t pos() const { return p_; }
  const Token& peek(size_t ahead = 0) const {
    size_t k = p_ + ahead;
    return k < t_.size() ? t_[k] : t_.back();
  }
  bool at_end() const { return peek().kind == Token::Kind::End; }
  bool is_op(const char* op, size_t ahead = 0) const {
    return peek(ahead).kind == Token::Kind::Op && peek(ahead).text == op;
  }
  bool is_name(const char* name, size_t ahead = 0) const {
    return peek(ahead).kind == Token::Kind::Name && peek(ahead).text == name;
  }
  const Token& next() {
    const Token& t = peek();
    if (p_ < t_.size() - 1) ++p_;
    return t;
  }
  void expect_op(const char* op) {
    if (!is_op(op))
      fail(std::string("expected '") + op + "' but found '" + describe(peek()) + "'", peek().line);
    next();
  }
  std::string expect_name() {
    if (peek().kind != Token::Kind::Name)
      fail("expected a name but found '" + describe(peek()) + "'", peek().line);
    return next().text;
  }
  void expect_end() {
    if (!at_end()) fail("unexpected '" + describe(peek()) + "'", peek().line);
  }
  static std::string describe(const Token& t) {
    return t.kind == Token::Kind::End ? "end of tag" : t.text;
  }

  // expression := or_expr ["if" or_expr ["else" expression]]
  ExprPtr expression(bool allow_cond = true) {
    Nest nest(*this);
    nest.more();
    ExprPtr e = or_expr();
    if (allow_cond && is_name("if")) {
      int line = next().line;
      auto c = std::make_unique<Expr>(Expr::Kind::Cond, line);
      c->b = std::move(e);
      c->a = or_expr();
      if (is_name("else")) {
        next();
        c->c = expression();
      }
      return c;
    }
    return e;
  }

  // A tuple without parentheses (for-loop iterables, set values): a, b, c
  ExprPtr tuple_or_expression() {
    ExprPtr first = expression();
    if (!is_op(",")) return first;
    auto tup = std::make_unique<Expr>(Expr::Kind::Tuple, first->line);
    tup->items.push_back(std::move(first));
    while (is_op(",")) {
      next();
      if (at_end()) break;
      tup->items.push_back(expression());
    }
    return tup;
  }

  ExprPtr or_expr() {
    ExprPtr l = and_expr();
    Nest nest(*this);
    while (is_name("or")) {
      nest.more();
      int line = next().line;
      l = binary("or", std::move(l), and_expr(), line);
    }
    return l;
  }

  ExprPtr and_expr() {
    ExprPtr l = not_expr();
    Nest nest(*this);
    while (is_name("and")) {
      nest.more();
      int line = next().line;
      l = binary("and", std::move(l), not_expr(), line);
    }
    return l;
  }

  ExprPtr not_expr() {
    if (is_name("not")) {
      Nest nest(*this);
      nest.more();
      int line = next().line;
      auto u = std::make_unique<Expr>(Expr::Kind::Unary, line);
      u->name = "not";
      u->a = not_expr();
      return u;
    }
    return compare();
  }

  ExprPtr compare() {
    ExprPtr l = math1();
    ExprPtr chain;  // the Compare node once a comparison operator is seen
    while (true) {
      const Token& t = peek();
      std::string op;
      if (t.kind == Token::Kind::Op && (t.text == "==" || t.text == "!=" || t.text == "<" ||
                                        t.text == "<=" || t.text == ">" || t.text == ">=")) {
        op = t.text;
        next();
      } else if (is_name("in")) {
        op = "in";
        next();
      } else if (is_name("not") && is_name("in", 1)) {
        op = "not in";
        next();
        next();
      } else {
        return chain ? std::move(chain) : std::move(l);
      }
      if (!chain) {
        chain = std::make_unique<Expr>(Expr::Kind::Compare, t.line);
        chain->items.push_back(std::move(l));
      }
      chain->ops.push_back(op);
      chain->items.push_back(math1());
    }
  }

  ExprPtr math1() {
    ExprPtr l = concat();
    Nest nest(*this);
    while (is_op("+") || is_op("-")) {
      nest.more();
      const Token& t = next();
      l = binary(t.text, std::move(l), concat(), t.line);
    }
    return l;
  }

  ExprPtr concat() {
    ExprPtr l = math2();
    Nest nest(*this);
    while (is_op("~")) {
      nest.more();
      int line = next().line;
      l = binary("~", std::move(l), math2(), line);
    }
    return l;
  }

  ExprPtr math2() {
    ExprPtr l = power();
    Nest nest(*this);
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      nest.more();
      const Token& t = next();
      l = binary(t.text, std::move(l), power(), t.line);
    }
    return l;
  }

  ExprPtr power() {
    ExprPtr l = unary();
    Nest nest(*this);
    while (is_op("**")) {
      nest.more();
      int line = next().line;
      l = binary("**", std::move(l), unary(), line);
    }
    return l;
  }

  ExprPtr unary() {
    if (is_op("-") || is_op("+")) {
      Nest nest(*this);
      nest.more();
      const Token& t = next();
      auto u = std::make_unique<Expr>(Expr::Kind::Unary, t.line);
      u->name = t.text;
      u->a = unary_no_filter();
      return filters(std::move(u));
    }
    return filters(postfix(primary()));
  }

  ExprPtr unary_no_filter() {
    if (is_op("-") || is_op("+")) {
      Nest nest(*this);
      nest.more();
      const Token& t = next();
      auto u = std::make_unique<Expr>(Expr::Kind::Unary, t.line);
      u->name = t.text;
      u->a = unary_no_filter();
      return u;
    }
    return postfix(primary());
  }

  ExprPtr primary() {
    const Token& t = peek();
    switch (t.kind) {
      case Token::Kind::String: {
        std::string s = next().text;
        while (peek().kind == Token::Kind::String) s += next().text;  // 'a' 'b' concatenates
        return literal(Value::string(std::move(s)), t.line);
      }
      case Token::Kind::Int:
        next();
        return literal(Value::integer(t.i), t.line);
      case Token::Kind::Float:
        next();
        return literal(Value::number(t.f), t.line);
      case Token::Kind::Name: {
        next();
        const std::string& n = t.text;
        if (n == "true" || n == "True") return literal(Value::boolean(true), t.line);
        if (n == "false" || n == "False") return literal(Value::boolean(false), t.line);
        if (n == "none" || n == "None") return literal(Value::none(), t.line);
        auto e = std::make_unique<Expr>(Expr::Kind::Name, t.line);
        e->name = n;
        return e;
      }
      case Token::Kind::Op:
        if (t.text == "(") {
          next();
          if (is_op(")")) {
            next();
            return std::make_unique<Expr>(Expr::Kind::Tuple, t.line);
          }
          ExprPtr first = expression();
          if (is_op(")")) {
            next();
            return first;
          }
          auto tup = std::make_unique<Expr>(Expr::Kind::Tuple, t.line);
          tup->items.push_back(std::move(first));
          while (is_op(",")) {
            next();
            if (is_op(")")) break;
            tup->items.push_back(expression());
          }
          expect_op(")");
          return tup;
        }
        if (t.text == "[") {
          next();
          auto list = std::make_unique<Expr>(Expr::Kind::List, t.line);
          while (!is_op("]")) {
            list->items.push_back(expression());
            if (!is_op(",")) break;
            next();
          }
          expect_op("]");
          return list;
        }
        if (t.text == "{") {
          next();
          auto dict = std::make_unique<Expr>(Expr::Kind::Dict, t.line);
          while (!is_op("}")) {
            dict->items.push_back(expression());
            expect_op(":");
            dict->items.push_back(expression());
            if (!is_op(",")) break;
            next();
          }
          expect_op("}");
          return dict;
        }
        break;
      default:
        break;
    }
    fail("unexpected '" + describe(t) + "' in expression", t.line);
  }

  ExprPtr postfix(ExprPtr e) {
    Nest nest(*this);
    while (true) {
      nest.more();  // each suffix wraps the expression once more (an upper bound)
      if (is_op(".")) {
        int line = next().line;
        auto a = std::make_unique<Expr>(Expr::Kind::Attr, line);
        if (peek().kind == Token::Kind::Int) {  // x.0 is x[0]
          a->kind = Expr::Kind::Index;
          a->b = literal(Value::integer(next().i), line);
        } else {
          a->name = expect_name();
        }
        a->a = std::move(e);
        e = std::move(a);
      } else if (is_op("[")) {
        int line = next().line;
        e = subscript(std::move(e), line);
      } else if (is_op("(")) {
        int line = next().line;
        auto call = std::make_unique<Expr>(Expr::Kind::Call, line);
        call->a = std::move(e);
        arguments(*call);
        e = std::move(call);
      } else {
        return e;
      }
    }
  }

  ExprPtr subscript(ExprPtr target, int line) {
    ExprPtr parts[3];
    int n = 0;
    bool is_slice = false;
    while (true) {
      if (is_op(":")) {
        is_slice = true;
        next();
        if (++n > 2) fail("bad slice", line);
        continue;
      }
      if (is_op("]")) break;
      parts[n] = expression();
      if (!is_op(":") && !is_op("]")) fail("expected ']' in subscript", line);
    }
    next();
    if (!is_slice) {
      if (!parts[0]) fail("empty subscript", line);
      auto idx = std::make_unique<Expr>(Expr::Kind::Index, line);
      idx->a = std::move(target);
      idx->b = std::move(parts[0]);
      return idx;
    }
    auto sl = std::make_unique<Expr>(Expr::Kind::Slice, line);
    sl->a = std::move(target);
    for (auto& p : parts) sl->items.push_back(std::move(p));
    return sl;
  }

  // After "(": positional and keyword arguments up to ")".
  void arguments(Expr& call) {
    while (!is_op(")")) {
      if (peek().kind == Token::Kind::Name && is_op("=", 1)) {
        std::string key = next().text;
        next();
        call.kwargs.emplace_back(key, expression());
      } else {
        if (!call.kwargs.empty()) fail("positional argument after keyword argument", peek().line);
        call.items.push_back(expression());
      }
      if (!is_op(",")) break;
      next();
    }
    expect_op(")");
  }

  ExprPtr filters(ExprPtr e) {
    Nest nest(*this);
    while (true) {
      nest.more();  // each suffix wraps the expression once more (an upper bound)
      if (is_op("|")) {
        int line = next().line;
        e = filter_call(std::move(e), line);
      } else if (is_name("is")) {
        int line = next().line;
        auto t = std::make_unique<Expr>(Expr::Kind::Test, line);
        if (is_name("not")) {
          next();
          t->negated = true;
        }
        t->name = expect_name();
        if (is_op("(")) {
          next();
          arguments(*t);
        } else if (!at_end() && starts_test_argument()) {
          t->items.push_back(unary_no_filter());
        }
        t->a = std::move(e);
        e = std::move(t);
      } else {
        return e;
      }
    }
  }

  // Parses "name[(args)]" after a "|" and applies it to `target` (may be null for filter blocks).
  ExprPtr filter_call(ExprPtr target, int line) {
    auto f = std::make_unique<Expr>(Expr::Kind::Filter, line);
    f->name = expect_name();
    while (is_op(".")) {  // dotted filter names are not supported but read them for the error
      next();
      f->name += "." + expect_name();
    }
    if (is_op("(")) {
      next();
      arguments(*f);
    }
    f->a = std::move(target);
    return f;
  }

 private:
  // "x is divisibleby 3": a test argument without parentheses starts with a literal or a name
  // that is not an operator keyword.
  bool starts_test_argument() const {
    const Token& t = peek();
    if (t.kind == Token::Kind::String || t.kind == Token::Kind::Int || t.kind == Token::Kind::Float)
      return true;
    if (t.kind == Token::Kind::Name) {
      static const std::set<std::string> kStop = {"and", "or", "if", "else", "is", "in", "not"};
      return !kStop.count(t.text);
    }
    return false;
  }

  static ExprPtr literal(Value v, int line) {
    auto e = std::make_unique<Expr>(Expr::Kind::Literal, line);
    e->value = std::move(v);
    return e;
  }
  static ExprPtr binary(std::string op, ExprPtr l, ExprPtr r, int line) {
    auto e = std::make_unique<Expr>(Expr::Kind::Binary, line);
    e->name = std::move(op);
    e->a = std::move(l);
    e->b = std::move(r);
    return e;
  }

  const std::vector<Token>& t_;
  size_t p_;
  int depth_ = 0;  // current nesting (Nest)
};

class Parser {
 public:
  explicit Parser(const std::vector<Segment>& segs) : segs_(segs) {}

  Body parse_all() {
    std::string end;
    Body body = parse_body({}, end);
    return body;
  }

 private:
  static std::string keyword(const Segment& s) {
    if (s.tokens.empty() || s.tokens[0].kind != Token::Kind::Name) return "";
    return s.tokens[0].text;
  }

  // Parses nodes until a statement whose keyword is in `ends` (returned in `end`, left unconsumed).
  Body parse_body(const std::set<std::string>& ends, std::string& end) {
    struct Depth {
      int& d;
      explicit Depth(int& x) : d(x) { ++d; }
      ~Depth() { --d; }
    } depth(block_depth_);
    if (block_depth_ > kMaxNesting)
      fail("blocks nested more than " + std::to_string(kMaxNesting) + " levels deep",
           i_ < segs_.size() ? segs_[i_].line : 1);
    Body body;
    while (i_ < segs_.size()) {
      const Segment& s = segs_[i_];
      if (s.kind == Segment::Kind::Text) {
        auto n = std::make_unique<Node>(Node::Kind::Text, s.line);
        n->text = s.text;
        body.push_back(std::move(n));
        ++i_;
        continue;
      }
      if (s.kind == Segment::Kind::Expr) {
        ExprParser p(s.tokens, 0);
        auto n = std::make_unique<Node>(Node::Kind::Output, s.line);
        n->expr = p.tuple_or_expression();
        p.expect_end();
        body.push_back(std::move(n));
        ++i_;
        continue;
      }
      std::string kw = keyword(s);
      if (ends.count(kw)) {
        end = kw;
        return body;
      }
      body.push_back(statement(s, kw));
    }
    if (!ends.empty()) {
      std::string expected;
      for (const auto& e : ends)
        if (e.rfind("end", 0) == 0) expected = e;
      fail("missing {% " + expected + " %}", segs_.empty() ? 1 : segs_.back().line);
    }
    return body;
  }

  // Consumes the closing statement `kw` (must have no arguments).
  void close(const char* kw) {
    const Segment& s = segs_[i_];
    ExprParser p(s.tokens, 1);
    if (!p.at_end() && !(p.peek().kind == Token::Kind::Name && std::string(kw) == "endmacro")) {
      fail(std::string("unexpected tokens after ") + kw, s.line);
    }
    ++i_;
  }

  NodePtr statement(const Segment& s, const std::string& kw) {
    int line = s.line;
    ExprParser p(s.tokens, 1);
    if (kw == "if") {
      auto n = std::make_unique<Node>(Node::Kind::If, line);
      ExprPtr cond = p.expression();
      p.expect_end();
      ++i_;
      while (true) {
        std::string end;
        Body b = parse_body({"elif", "else", "endif"}, end);
        n->branches.emplace_back(std::move(cond), std::move(b));
        const Segment& e = segs_[i_];
        if (end == "elif") {
          ExprParser q(e.tokens, 1);
          cond = q.expression();
          q.expect_end();
          ++i_;
          continue;
        }
        if (end == "else") {
          close("else");
          std::string end2;
          n->else_body = parse_body({"endif"}, end2);
        }
        close("endif");
        return n;
      }
    }
    if (kw == "for") {
      auto n = std::make_unique<Node>(Node::Kind::For, line);
      bool paren = p.is_op("(");
      if (paren) p.next();
      n->targets.push_back(p.expect_name());
      while (p.is_op(",")) {
        p.next();
        n->targets.push_back(p.expect_name());
      }
      if (paren) p.expect_op(")");
      if (!p.is_name("in")) fail("expected 'in' in for loop", line);
      p.next();
      n->expr = p.expression(false);
      if (p.is_name("if")) {
        p.next();
        n->filter = p.expression(false);
      }
      if (p.is_name("recursive")) fail("unsupported construct 'for ... recursive'", line);
      p.expect_end();
      ++i_;
      std::string end;
      n->body = parse_body({"else", "endfor"}, end);
      if (end == "else") {
        close("else");
        n->else_body = parse_body({"endfor"}, end);
      }
      close("endfor");
      return n;
    }
    if (kw == "set") {
      auto n = std::make_unique<Node>(Node::Kind::Set, line);
      n->targets.push_back(p.expect_name());
      if (p.is_op(".")) {
        p.next();
        n->targets.push_back(p.expect_name());
        n->attr_target = true;
      } else {
        while (p.is_op(",")) {
          p.next();
          n->targets.push_back(p.expect_name());
        }
      }
      if (p.is_op("=")) {
        p.next();
        n->expr = p.tuple_or_expression();
        p.expect_end();
        ++i_;
        return n;
      }
      if (p.is_op("|")) fail("unsupported construct 'set with filter block'", line);
      p.expect_end();
      if (n->targets.size() != 1 || n->attr_target) fail("bad block set", line);
      ++i_;
      std::string end;
      n->body = parse_body({"endset"}, end);
      close("endset");
      return n;
    }
    if (kw == "macro") {
      auto n = std::make_unique<Node>(Node::Kind::Macro, line);
      n->targets.push_back(p.expect_name());
      p.expect_op("(");
      while (!p.is_op(")")) {
        std::string name = p.expect_name();
        ExprPtr def;
        if (p.is_op("=")) {
          p.next();
          def = p.expression();
        }
        n->params.emplace_back(name, std::move(def));
        if (!p.is_op(",")) break;
        p.next();
      }
      p.expect_op(")");
      p.expect_end();
      ++i_;
      std::string end;
      n->body = parse_body({"endmacro"}, end);
      close("endmacro");
      return n;
    }
    if (kw == "filter") {
      auto n = std::make_unique<Node>(Node::Kind::FilterBlock, line);
      n->expr = p.filter_call(nullptr, line);
      while (p.is_op("|")) {
        int l = p.next().line;
        n->expr = p.filter_call(std::move(n->expr), l);
      }
      p.expect_end();
      ++i_;
      std::string end;
      n->body = parse_body({"endfilter"}, end);
      close("endfilter");
      return n;
    }
    if (kw == "break" || kw == "continue") {
      p.expect_end();
      ++i_;
      return std::make_unique<Node>(kw == "break" ? Node::Kind::Break : Node::Kind::Continue, line);
    }
    if (kw == "do") {
      auto n = std::make_unique<Node>(Node::Kind::Do, line);
      n->expr = p.tuple_or_expression();
      p.expect_end();
      ++i_;
      return n;
    }
    if (kw == "generation") {
      auto n = std::make_unique<Node>(Node::Kind::Generation, line);
      p.expect_end();
      ++i_;
      std::string end;
      n->body = parse_body({"endgeneration"}, end);
      close("endgeneration");
      return n;
    }
    static const std::set<std::string> kKnownUnsupported = {
        "include", "import", "from", "extends", "block", "call", "with", "autoescape", "trans"};
    if (kKnownUnsupported.count(kw)) fail("unsupported statement '" + kw + "'", line);
    if (kw.empty()) fail("empty statement", line);
    fail("unknown or misplaced statement '" + kw + "'", line);
  }

  const std::vector<Segment>& segs_;
  size_t i_ = 0;
  int block_depth_ = 0;  // parse_body calls in progress (kMaxNesting)
};

}  // namespace

Body parse(const std::vector<Segment>& segments) {
  return Parser(segments).parse_all();
}

}  // namespace perfx::jinja
