//! Text to expressions: a hand-written tokenizer and a precedence-climbing parser (SQL's precedence: `OR` <
//! `AND` < `NOT` < comparisons, `IS NULL`, `IN`, `BETWEEN` < `+ -` < `* / %` < unary minus). Keywords are
//! case-insensitive; a column name is an identifier or a double-quoted name.
//!
//! Everything downstream (typing, compiling, evaluating, dropping) walks the tree recursively, so the parser
//! refuses a tree deeper than [`MAX_EXPR_DEPTH`]: it counts the depth of what it builds (a chain `a + b + …`
//! is one level per term) and stops at the limit before building further. The parser itself recurses once per
//! parenthesis, `NOT`, `-` and function call it is inside, through a few frames each, so those nest at most
//! [`MAX_EXPR_NESTING`] deep; chains it reads in a loop.

use super::ast::{BinaryOp, Expr, Function, Literal, UnaryOp};

/// A parse error: what was expected, and where (a character offset into the text).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message} at character {at} of {text:?}")]
pub struct ParseError {
    /// What went wrong.
    pub message: String,
    /// Character offset of the problem.
    pub at: usize,
    /// The text (cut short when long).
    pub text: String,
}

/// The deepest expression tree accepted: each operator, `NOT`, `-` and function call is a level, and a chain
/// `a + b + c` is a level per term. Typing and evaluation recurse once per level; a task's thread and the job
/// manager's threads have stack for many times this.
pub const MAX_EXPR_DEPTH: usize = 256;

/// The deepest nesting of parentheses, `NOT`, `-` and function calls accepted: the parser recurses through
/// several frames for each, and stays within a fraction of a 2 MiB thread's stack at this depth.
pub const MAX_EXPR_NESTING: usize = 64;

/// One item of a select list: an expression and the name of the column it makes.
#[derive(Clone, Debug, PartialEq)]
pub enum SelectItem {
    /// `*`: every input column (the runtime's `_` columns aside), as it is.
    Star,
    /// `expr [AS name]`: without `AS`, only a bare column may stand, and keeps its name.
    Expr {
        /// The expression.
        expr: Expr,
        /// The output column's name.
        name: String,
    },
}

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Ident(String),
    Quoted(String),
    Number(String),
    Str(String),
    Sym(&'static str),
}

fn tokenize(text: &str) -> Result<Vec<(Tok, usize)>, ParseError> {
    let err = |message: String, at: usize| ParseError { message, at, text: weir_common::text::echo(text) };
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let start = i;
        if c.is_whitespace() {
            i += 1;
        } else if c.is_ascii_alphabetic() || c == '_' {
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push((Tok::Ident(chars[start..i].iter().collect()), start));
        } else if c.is_ascii_digit() || (c == '.' && chars.get(i + 1).is_some_and(|d| d.is_ascii_digit())) {
            while i < chars.len() && (chars[i].is_ascii_digit() || chars[i] == '.') {
                i += 1;
            }
            if i < chars.len() && matches!(chars[i], 'e' | 'E') {
                i += 1;
                if i < chars.len() && matches!(chars[i], '+' | '-') {
                    i += 1;
                }
                while i < chars.len() && chars[i].is_ascii_digit() {
                    i += 1;
                }
            }
            out.push((Tok::Number(chars[start..i].iter().collect()), start));
        } else if c == '\'' || c == '"' {
            let mut s = String::new();
            i += 1;
            loop {
                match chars.get(i) {
                    None => return Err(err(format!("unterminated {c}…{c}"), start)),
                    Some(&q) if q == c && chars.get(i + 1) == Some(&c) => {
                        s.push(c);
                        i += 2;
                    }
                    Some(&q) if q == c => {
                        i += 1;
                        break;
                    }
                    Some(&o) => {
                        s.push(o);
                        i += 1;
                    }
                }
            }
            out.push((if c == '\'' { Tok::Str(s) } else { Tok::Quoted(s) }, start));
        } else {
            let two: String = chars[i..(i + 2).min(chars.len())].iter().collect();
            let sym = ["<=", ">=", "<>", "!="].into_iter().find(|s| *s == two).or_else(|| {
                ["(", ")", ",", "+", "-", "*", "/", "%", "=", "<", ">"].into_iter().find(|s| s.starts_with(c))
            });
            let Some(sym) = sym else { return Err(err(format!("unexpected character {c:?}"), start)) };
            i += sym.len();
            out.push((Tok::Sym(sym), start));
        }
    }
    Ok(out)
}

struct Parser<'t> {
    toks: Vec<(Tok, usize)>,
    pos: usize,
    text: &'t str,
    /// Levels the parser is inside (parentheses, `NOT`, `-`, arguments): bounds its own recursion.
    nesting: usize,
}

/// An expression and the depth of its tree.
type Deep = (Expr, usize);

fn too_deep() -> String {
    format!(
        "the expression is more than {MAX_EXPR_DEPTH} levels deep (each operator, NOT, - and function call is a \
         level, and a chain `a + b + …` a level per term)"
    )
}

fn too_nested() -> String {
    format!("the expression nests parentheses, NOT, - and function calls more than {MAX_EXPR_NESTING} levels deep")
}

impl Parser<'_> {
    fn err(&self, message: impl Into<String>) -> ParseError {
        let at = self.toks.get(self.pos).map_or(self.text.chars().count(), |(_, at)| *at);
        ParseError { message: message.into(), at, text: weir_common::text::echo(self.text) }
    }

    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.pos).map(|(t, _)| t)
    }

    fn keyword(&self, word: &str) -> bool {
        matches!(self.peek(), Some(Tok::Ident(w)) if w.eq_ignore_ascii_case(word))
    }

    fn eat_keyword(&mut self, word: &str) -> bool {
        let yes = self.keyword(word);
        self.pos += usize::from(yes);
        yes
    }

    fn eat_sym(&mut self, sym: &str) -> bool {
        let yes = matches!(self.peek(), Some(Tok::Sym(s)) if *s == sym);
        self.pos += usize::from(yes);
        yes
    }

    /// Goes one level further in, refusing to go past the nesting limit.
    fn enter(&mut self) -> Result<(), ParseError> {
        if self.nesting >= MAX_EXPR_NESTING {
            return Err(self.err(too_nested()));
        }
        self.nesting += 1;
        Ok(())
    }

    fn leave(&mut self) {
        self.nesting -= 1;
    }

    /// A node of depth `depth` (its deepest child's + 1), unless that is past the limit.
    fn node(&self, e: Expr, depth: usize) -> Result<Deep, ParseError> {
        if depth > MAX_EXPR_DEPTH {
            return Err(self.err(too_deep()));
        }
        Ok((e, depth))
    }

    fn binary(&self, op: BinaryOp, (a, da): Deep, (b, db): Deep) -> Result<Deep, ParseError> {
        self.node(Expr::Binary(op, Box::new(a), Box::new(b)), da.max(db) + 1)
    }

    /// `parse` one level further in.
    fn inside<T>(&mut self, parse: impl FnOnce(&mut Self) -> Result<T, ParseError>) -> Result<T, ParseError> {
        self.enter()?;
        let r = parse(self);
        self.leave();
        r
    }

    fn expect_sym(&mut self, sym: &str) -> Result<(), ParseError> {
        if self.eat_sym(sym) {
            Ok(())
        } else {
            Err(self.err(format!("expected {sym:?}")))
        }
    }

    fn or(&mut self) -> Result<Deep, ParseError> {
        let mut e = self.and()?;
        while self.eat_keyword("OR") {
            let b = self.and()?;
            e = self.binary(BinaryOp::Or, e, b)?;
        }
        Ok(e)
    }

    fn and(&mut self) -> Result<Deep, ParseError> {
        let mut e = self.not()?;
        while self.eat_keyword("AND") {
            let b = self.not()?;
            e = self.binary(BinaryOp::And, e, b)?;
        }
        Ok(e)
    }

    fn not(&mut self) -> Result<Deep, ParseError> {
        if self.eat_keyword("NOT") {
            let (x, d) = self.inside(Self::not)?;
            return self.node(Expr::Unary(UnaryOp::Not, Box::new(x)), d + 1);
        }
        self.comparison()
    }

    fn comparison(&mut self) -> Result<Deep, ParseError> {
        let e = self.additive()?;
        const OPS: [(&str, BinaryOp); 7] = [
            ("=", BinaryOp::Eq),
            ("<>", BinaryOp::NotEq),
            ("!=", BinaryOp::NotEq),
            ("<=", BinaryOp::LtEq),
            (">=", BinaryOp::GtEq),
            ("<", BinaryOp::Lt),
            (">", BinaryOp::Gt),
        ];
        for (sym, op) in OPS {
            if self.eat_sym(sym) {
                let b = self.additive()?;
                return self.binary(op, e, b);
            }
        }
        let (e, depth) = e;
        if self.eat_keyword("IS") {
            let negated = self.eat_keyword("NOT");
            if !self.eat_keyword("NULL") {
                return Err(self.err("expected NULL after IS"));
            }
            return self.node(Expr::IsNull { expr: Box::new(e), negated }, depth + 1);
        }
        let negated = self.eat_keyword("NOT");
        if self.eat_keyword("IN") {
            self.expect_sym("(")?;
            let mut list = vec![self.literal()?];
            while self.eat_sym(",") {
                list.push(self.literal()?);
            }
            self.expect_sym(")")?;
            return self.node(Expr::InList { expr: Box::new(e), list, negated }, depth + 1);
        }
        if self.eat_keyword("BETWEEN") {
            // `x BETWEEN a AND b` is `x >= a AND x <= b` (x is evaluated twice; it has no side effects).
            let low = self.additive()?;
            if !self.eat_keyword("AND") {
                return Err(self.err("expected AND in BETWEEN … AND …"));
            }
            let high = self.additive()?;
            let ge = self.binary(BinaryOp::GtEq, (e.clone(), depth), low)?;
            let le = self.binary(BinaryOp::LtEq, (e, depth), high)?;
            let both = self.binary(BinaryOp::And, ge, le)?;
            return if negated { self.node(Expr::Unary(UnaryOp::Not, Box::new(both.0)), both.1 + 1) } else { Ok(both) };
        }
        if negated {
            return Err(self.err("expected IN or BETWEEN after NOT"));
        }
        Ok((e, depth))
    }

    fn additive(&mut self) -> Result<Deep, ParseError> {
        let mut e = self.multiplicative()?;
        loop {
            let op = if self.eat_sym("+") {
                BinaryOp::Add
            } else if self.eat_sym("-") {
                BinaryOp::Sub
            } else {
                return Ok(e);
            };
            let b = self.multiplicative()?;
            e = self.binary(op, e, b)?;
        }
    }

    fn multiplicative(&mut self) -> Result<Deep, ParseError> {
        let mut e = self.unary()?;
        loop {
            let op = if self.eat_sym("*") {
                BinaryOp::Mul
            } else if self.eat_sym("/") {
                BinaryOp::Div
            } else if self.eat_sym("%") {
                BinaryOp::Rem
            } else {
                return Ok(e);
            };
            let b = self.unary()?;
            e = self.binary(op, e, b)?;
        }
    }

    fn unary(&mut self) -> Result<Deep, ParseError> {
        if self.eat_sym("-") {
            let (x, d) = self.inside(Self::unary)?;
            return match x {
                Expr::Literal(Literal::Int(v)) => Ok((Expr::Literal(Literal::Int(-v)), d)),
                Expr::Literal(Literal::Decimal { unscaled, precision, scale }) => {
                    Ok((Expr::Literal(Literal::Decimal { unscaled: -unscaled, precision, scale }), d))
                }
                Expr::Literal(Literal::Float(v)) => Ok((Expr::Literal(Literal::Float(-v)), d)),
                e => self.node(Expr::Unary(UnaryOp::Neg, Box::new(e)), d + 1),
            };
        }
        self.primary()
    }

    fn primary(&mut self) -> Result<Deep, ParseError> {
        if self.eat_sym("(") {
            let e = self.inside(Self::or)?;
            self.expect_sym(")")?;
            return Ok(e);
        }
        match self.peek().cloned() {
            Some(Tok::Ident(w))
                if w.eq_ignore_ascii_case("MOD")
                    && self.toks.get(self.pos + 1).map(|t| &t.0) == Some(&Tok::Sym("(")) =>
            {
                self.pos += 2;
                let (a, b) = self.inside(|p| {
                    let a = p.or()?;
                    p.expect_sym(",")?;
                    Ok((a, p.or()?))
                })?;
                self.expect_sym(")")?;
                self.binary(BinaryOp::Rem, a, b)
            }
            Some(Tok::Ident(w)) if is_reserved(&w) && !is_literal_word(&w) => {
                Err(self.err(format!("unexpected keyword {w}")))
            }
            Some(Tok::Ident(w)) if !is_literal_word(&w) => {
                self.pos += 1;
                if !self.eat_sym("(") {
                    return Ok((Expr::Column(w), 1));
                }
                let Some((function, arity)) = Function::named(&w) else {
                    self.pos -= 1;
                    return Err(self.err(format!("unknown function {w:?} (known: MOD, KEY_INT)")));
                };
                let args = self.inside(|p| {
                    let mut args = vec![p.or()?];
                    while p.eat_sym(",") {
                        args.push(p.or()?);
                    }
                    Ok(args)
                })?;
                self.expect_sym(")")?;
                if args.len() != arity {
                    return Err(self.err(format!("{} takes {arity} argument(s), not {}", function.name(), args.len())));
                }
                let depth = args.iter().map(|(_, d)| *d).max().unwrap_or(0) + 1;
                self.node(Expr::Call(function, args.into_iter().map(|(a, _)| a).collect()), depth)
            }
            Some(Tok::Quoted(name)) => {
                self.pos += 1;
                Ok((Expr::Column(name), 1))
            }
            _ => Ok((Expr::Literal(self.literal()?), 1)),
        }
    }

    fn literal(&mut self) -> Result<Literal, ParseError> {
        let negative = self.eat_sym("-");
        let lit = match self.peek().cloned() {
            Some(Tok::Number(n)) => number(&n).ok_or_else(|| self.err(format!("{n:?} is not a number")))?,
            Some(Tok::Str(s)) if !negative => Literal::Str(s),
            Some(Tok::Ident(w)) if !negative && w.eq_ignore_ascii_case("NULL") => Literal::Null,
            Some(Tok::Ident(w)) if !negative && w.eq_ignore_ascii_case("TRUE") => Literal::Bool(true),
            Some(Tok::Ident(w)) if !negative && w.eq_ignore_ascii_case("FALSE") => Literal::Bool(false),
            None => return Err(self.err("unexpected end of the expression")),
            Some(_) => return Err(self.err("expected a value")),
        };
        self.pos += 1;
        Ok(match (negative, lit) {
            (false, l) => l,
            (true, Literal::Int(v)) => Literal::Int(-v),
            (true, Literal::Decimal { unscaled, precision, scale }) => {
                Literal::Decimal { unscaled: -unscaled, precision, scale }
            }
            (true, Literal::Float(v)) => Literal::Float(-v),
            (true, l) => l,
        })
    }
}

fn is_literal_word(w: &str) -> bool {
    ["NULL", "TRUE", "FALSE"].iter().any(|k| w.eq_ignore_ascii_case(k))
}

fn is_reserved(w: &str) -> bool {
    ["AND", "OR", "NOT", "IS", "IN", "BETWEEN", "AS", "NULL", "TRUE", "FALSE"].iter().any(|k| w.eq_ignore_ascii_case(k))
}

/// A numeric literal: an integer, a decimal (digits with a point) or a double (with an exponent).
fn number(text: &str) -> Option<Literal> {
    if text.contains(['e', 'E']) {
        return text.parse::<f64>().ok().filter(|f| f.is_finite()).map(Literal::Float);
    }
    match text.split_once('.') {
        None => text.parse::<i64>().ok().map(Literal::Int),
        Some((int, frac)) => {
            if frac.contains('.') {
                return None;
            }
            let digits = format!("{int}{frac}");
            let unscaled = if digits.is_empty() { return None } else { digits.parse::<i128>().ok()? };
            let significant = int.trim_start_matches('0').len() + frac.len();
            let precision = significant.max(frac.len()).max(1);
            if precision > 38 {
                return None;
            }
            Some(Literal::Decimal { unscaled, precision: precision as u8, scale: frac.len() as i8 })
        }
    }
}

/// Parses one expression.
pub fn parse_expr(text: &str) -> Result<Expr, ParseError> {
    let mut p = Parser { toks: tokenize(text)?, pos: 0, text, nesting: 0 };
    if p.toks.is_empty() {
        return Err(p.err("the expression is empty"));
    }
    let (e, _) = p.or()?;
    if p.pos < p.toks.len() {
        return Err(p.err("unexpected text after the expression"));
    }
    Ok(e)
}

/// Parses a comma-separated list of expressions (a key: `bid_auction` or `a, b`).
pub fn parse_list(text: &str) -> Result<Vec<Expr>, ParseError> {
    let mut p = Parser { toks: tokenize(text)?, pos: 0, text, nesting: 0 };
    let mut out = vec![p.or()?.0];
    while p.eat_sym(",") {
        out.push(p.or()?.0);
    }
    if p.pos < p.toks.len() {
        return Err(p.err("expected a comma or the end of the list"));
    }
    Ok(out)
}

/// Parses a select list: `*` or `expr [AS name]`, comma-separated.
pub fn parse_select(text: &str) -> Result<Vec<SelectItem>, ParseError> {
    let mut p = Parser { toks: tokenize(text)?, pos: 0, text, nesting: 0 };
    let mut out = Vec::new();
    loop {
        if p.eat_sym("*") {
            out.push(SelectItem::Star);
        } else {
            let (expr, _) = p.or()?;
            let name = if p.eat_keyword("AS") {
                match p.peek().cloned() {
                    Some(Tok::Ident(n) | Tok::Quoted(n)) => {
                        p.pos += 1;
                        n
                    }
                    _ => return Err(p.err("expected a column name after AS")),
                }
            } else if let Expr::Column(c) = &expr {
                c.clone()
            } else {
                return Err(p.err("an expression that is not a bare column needs a name: `… AS name`"));
            };
            out.push(SelectItem::Expr { expr, name });
        }
        if !p.eat_sym(",") {
            break;
        }
    }
    if p.pos < p.toks.len() {
        return Err(p.err("expected a comma or the end of the select list"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn col(c: &str) -> Box<Expr> {
        Box::new(Expr::Column(c.into()))
    }

    fn int(v: i64) -> Box<Expr> {
        Box::new(Expr::Literal(Literal::Int(v)))
    }

    #[test]
    fn precedence_follows_sql() {
        let e = parse_expr("event_type = 2 AND MOD(bid_auction, 123) = 0 OR NOT a > -1").unwrap();
        let left = Expr::Binary(
            BinaryOp::And,
            Box::new(Expr::Binary(BinaryOp::Eq, col("event_type"), int(2))),
            Box::new(Expr::Binary(
                BinaryOp::Eq,
                Box::new(Expr::Binary(BinaryOp::Rem, col("bid_auction"), int(123))),
                int(0),
            )),
        );
        let right = Expr::Unary(UnaryOp::Not, Box::new(Expr::Binary(BinaryOp::Gt, col("a"), int(-1))));
        assert_eq!(e, Expr::Binary(BinaryOp::Or, Box::new(left), Box::new(right)));
        assert_eq!(
            parse_expr("1 + 2 * x").unwrap(),
            Expr::Binary(BinaryOp::Add, int(1), Box::new(Expr::Binary(BinaryOp::Mul, int(2), col("x"))))
        );
        assert_eq!(parse_expr("(1 + 2) * x").unwrap().columns(), vec!["x"]);
    }

    #[test]
    fn literals_keep_their_sql_types() {
        assert_eq!(
            parse_expr("0.908").unwrap(),
            Expr::Literal(Literal::Decimal { unscaled: 908, precision: 3, scale: 3 })
        );
        assert_eq!(
            parse_expr("12.50").unwrap(),
            Expr::Literal(Literal::Decimal { unscaled: 1250, precision: 4, scale: 2 })
        );
        assert_eq!(parse_expr("2.5e-1").unwrap(), Expr::Literal(Literal::Float(0.25)));
        assert_eq!(parse_expr("'it''s'").unwrap(), Expr::Literal(Literal::Str("it's".into())));
        assert_eq!(parse_expr("\"odd name\"").unwrap(), Expr::Column("odd name".into()));
        let e = parse_expr("s NOT IN ('OR', 'ID') AND x IS NOT NULL").unwrap();
        assert_eq!(e.columns(), vec!["s", "x"]);
    }

    #[test]
    fn select_lists_name_their_columns_and_bad_text_says_where() {
        let items = parse_select("bid_auction AS auction, price, 0.908 * price AS eur, *").unwrap();
        assert_eq!(items.len(), 4);
        assert!(matches!(&items[1], SelectItem::Expr { name, .. } if name == "price"));
        assert_eq!(items[3], SelectItem::Star);
        let e = parse_select("price * 2").unwrap_err();
        assert!(e.message.contains("AS name"), "{e}");
        let e = parse_expr("a = = 1").unwrap_err();
        assert_eq!(e.at, 4, "{e}");
        assert!(parse_expr("a = 'open").unwrap_err().message.contains("unterminated"));
        assert!(parse_expr("f(a)").unwrap_err().message.contains("unknown function"));
        assert_eq!(parse_expr("key_int(key)").unwrap(), Expr::Call(Function::KeyInt, vec![Expr::Column("key".into())]));
        assert!(parse_expr("KEY_INT(a, b)").unwrap_err().message.contains("takes 1"));
        assert!(parse_expr("a ^ 2").unwrap_err().message.contains("unexpected character"));
        assert!(parse_expr("").is_err());
        assert!(parse_expr("a b").unwrap_err().message.contains("after the expression"));
        assert_eq!(parse_list("a, b % 2").unwrap().len(), 2);
    }
}

#[cfg(test)]
mod depth_tests {
    use super::*;

    /// The shapes a hostile input nests (parentheses, NOT, minus, function arguments) `n` deep.
    fn nested(n: usize) -> Vec<(&'static str, String)> {
        vec![
            ("parentheses", format!("{}a{}", "(".repeat(n), ")".repeat(n))),
            ("NOT", format!("{}a", "NOT ".repeat(n))),
            ("minus", format!("{}a", "- ".repeat(n))),
            ("MOD", format!("{}a{}", "MOD(".repeat(n), ", 2)".repeat(n))),
        ]
    }

    /// The chains a hostile input makes `n` terms long (read in a loop, each term a level of the tree).
    fn chains(n: usize) -> Vec<(&'static str, String)> {
        vec![
            ("sum", format!("a{}", " + 1".repeat(n))),
            ("AND", format!("a{}", " AND a".repeat(n))),
            ("comparisons in parentheses", format!("a = 1{}", " OR (a = 1)".repeat(n))),
        ]
    }

    fn depth(e: &Expr) -> usize {
        match e {
            Expr::Column(_) | Expr::Literal(_) => 1,
            Expr::Unary(_, x) | Expr::IsNull { expr: x, .. } | Expr::InList { expr: x, .. } => depth(x) + 1,
            Expr::Binary(_, a, b) => depth(a).max(depth(b)) + 1,
            Expr::Call(_, args) => args.iter().map(depth).max().unwrap_or(0) + 1,
        }
    }

    /// Runs `f` on a thread with a small stack: parsing at the limit must fit in far less than any thread has.
    fn on_small_stack<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        std::thread::Builder::new().stack_size(512 * 1024).spawn(f).unwrap().join().unwrap()
    }

    #[test]
    fn trees_up_to_the_limits_parse_and_deeper_ones_are_refused_by_name() {
        on_small_stack(|| {
            // The deepest accepted of each shape is at the limit; one more level is refused.
            for (shape, text) in nested(MAX_EXPR_NESTING) {
                parse_expr(&text).unwrap_or_else(|e| panic!("{shape}: {e}"));
            }
            for (shape, text) in nested(MAX_EXPR_NESTING + 1) {
                let e = parse_expr(&text).expect_err(shape);
                assert!(e.message.contains("more than 64 levels deep"), "{shape}: {e}");
            }
            for (shape, text) in chains(MAX_EXPR_DEPTH - 3) {
                let e = parse_expr(&text).unwrap_or_else(|e| panic!("{shape}: {e}"));
                assert!((MAX_EXPR_DEPTH - 2..=MAX_EXPR_DEPTH).contains(&depth(&e)), "{shape}: depth {}", depth(&e));
            }
            for (shape, text) in chains(MAX_EXPR_DEPTH) {
                let e = parse_expr(&text).expect_err(shape);
                assert!(e.message.contains("more than 256 levels deep"), "{shape}: {e}");
            }
        });
    }

    #[test]
    fn hostile_depths_are_refused_quickly_without_exhausting_the_stack() {
        // The probe's inputs: 1,300 parentheses, NOT x16,000, - x20,000, a flat sum of 16,000 terms.
        on_small_stack(|| {
            for (shape, text) in nested(20_000).into_iter().chain(chains(16_000)) {
                let began = std::time::Instant::now();
                let e = parse_expr(&text).expect_err(shape);
                assert!(e.message.contains("levels deep"), "{shape}: {e}");
                assert!(e.text.len() < 200, "{shape}: the error echoes {} bytes", e.text.len());
                assert!(began.elapsed() < std::time::Duration::from_secs(1), "{shape}: {:?}", began.elapsed());
            }
            let list = format!("a, {}", ["b + 1"; 5].join(" + "));
            assert_eq!(parse_list(&list).unwrap().len(), 2);
            assert!(parse_select(&format!("{} AS x", "-".repeat(10_000) + "a")).is_err());
        });
    }
}
