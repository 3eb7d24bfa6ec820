//! Text to parsed expressions and select lists, with sqlparser and Flink's lexical conventions: names may be
//! backticked (or double-quoted) and are kept as written, keywords are case-insensitive, strings are single-quoted.
//!
//! Everything downstream (DataFusion's planning, type coercion and evaluation) walks the tree recursively, so the
//! size of what is accepted is bounded before any of it runs: parentheses, `NOT`, unary minus and function calls
//! nest at most [`MAX_EXPR_NESTING`] deep (the parser's recursion limit), and an expression has at most
//! [`MAX_EXPR_OPERATORS`] operators (a chain `a + b + c …` is a level of the tree per operator).

use super::error::ExprError;
use sqlparser::ast::{Expr as AstExpr, Ident, SelectItem as AstSelectItem};
use sqlparser::dialect::GenericDialect;
use sqlparser::keywords::Keyword;
use sqlparser::parser::{Parser, ParserError};
use sqlparser::tokenizer::{Token, Tokenizer};

/// The most operators (arithmetic, comparisons, `AND`, `OR`, `NOT`, `IS`, `IN`, `BETWEEN`, `LIKE`) one
/// expression may have: each is at most a level of its tree, and the planner and evaluator recurse once per level.
pub const MAX_EXPR_OPERATORS: usize = 256;

/// The parser's recursion limit: parentheses, `NOT`, `-` and function calls each take one or more of it, so they
/// nest somewhat less deep than this.
pub const MAX_EXPR_NESTING: usize = 64;

/// The longest expression text accepted, in bytes.
pub const MAX_EXPR_TEXT: usize = 64 * 1024;

/// A parsed SQL scalar expression, with the text it was read from.
#[derive(Clone, Debug, PartialEq)]
pub struct SqlExpr {
    pub(crate) ast: Box<AstExpr>,
}

impl SqlExpr {
    /// The column `name`, as it is.
    pub fn column(name: &str) -> SqlExpr {
        SqlExpr { ast: Box::new(AstExpr::Identifier(Ident::with_quote('`', name))) }
    }

    /// The expression as SQL text (normalised: sqlparser's rendering of what it read).
    pub fn sql(&self) -> String {
        self.ast.to_string()
    }
}

/// One item of a select list: an expression and the name of the column it makes.
#[derive(Clone, Debug, PartialEq)]
pub enum SelectItem {
    /// `*`: every input column (the runtime's `_` columns aside), as it is.
    Star,
    /// `expr [AS name]`: without `AS`, only a column may stand, and keeps its name (`person.name` is `name`).
    Expr {
        /// The expression.
        expr: SqlExpr,
        /// The output column's name.
        name: String,
    },
}

fn syntax(e: ParserError) -> ExprError {
    if let ParserError::RecursionLimitExceeded = e {
        return ExprError::new(format!(
            "parentheses, NOT, minus signs and function calls nest too many levels deep (the parser's limit is \
             {MAX_EXPR_NESTING})"
        ));
    }
    let m = e.to_string();
    ExprError::new(m.strip_prefix("sql parser error: ").unwrap_or(&m).to_string())
}

/// Refuses a text longer than [`MAX_EXPR_TEXT`] or with more than [`MAX_EXPR_OPERATORS`] operators.
fn bounded(text: &str) -> Result<(), ExprError> {
    if text.len() > MAX_EXPR_TEXT {
        return Err(ExprError::new(format!(
            "an expression of {} bytes: at most {MAX_EXPR_TEXT} are accepted",
            text.len()
        )));
    }
    if text.trim().is_empty() {
        return Err(ExprError::new("an empty expression"));
    }
    let tokens = Tokenizer::new(&GenericDialect {}, text).tokenize_with_location().map_err(|e| {
        let m = e.to_string();
        ExprError::new(m)
    })?;
    // Per item of a list (`a + 1, b * 2`): each is a tree of its own.
    let mut operators = 0;
    let mut item = 0;
    let mut depth = 0usize;
    for t in &tokens {
        match &t.token {
            Token::LParen => depth += 1,
            Token::RParen => depth = depth.saturating_sub(1),
            Token::Comma if depth == 0 => item = 0,
            other if is_operator(other) => {
                item += 1;
                operators = operators.max(item);
            }
            _ => {}
        }
    }
    if operators > MAX_EXPR_OPERATORS {
        return Err(ExprError::new(format!(
            "an expression of {operators} operators nests up to that many levels deep: at most \
             {MAX_EXPR_OPERATORS} are accepted"
        )));
    }
    Ok(())
}

/// Whether a token is an operator: each is at most a level of an expression's tree.
pub(crate) fn is_operator(t: &Token) -> bool {
    match t {
        Token::Plus
        | Token::Minus
        | Token::Mul
        | Token::Div
        | Token::Mod
        | Token::Eq
        | Token::DoubleEq
        | Token::Neq
        | Token::Lt
        | Token::Gt
        | Token::LtEq
        | Token::GtEq
        | Token::StringConcat => true,
        Token::Word(w) => matches!(
            w.keyword,
            Keyword::AND | Keyword::OR | Keyword::NOT | Keyword::IS | Keyword::IN | Keyword::BETWEEN | Keyword::LIKE
        ),
        _ => false,
    }
}

fn parser(text: &str) -> Result<Parser<'static>, ExprError> {
    static DIALECT: GenericDialect = GenericDialect {};
    bounded(text)?;
    Parser::new(&DIALECT).with_recursion_limit(MAX_EXPR_NESTING).try_with_sql(text).map_err(syntax)
}

fn at_end(p: &mut Parser<'_>) -> Result<(), ExprError> {
    let next = p.peek_token();
    if next.token == Token::EOF {
        return Ok(());
    }
    Err(ExprError::new(format!("unexpected `{}` at {}", next.token, next.span.start)))
}

/// Parses one expression.
pub fn parse_expr(text: &str) -> Result<SqlExpr, ExprError> {
    let mut p = parser(text)?;
    let ast = p.parse_expr().map_err(syntax)?;
    at_end(&mut p)?;
    Ok(SqlExpr { ast: Box::new(ast) })
}

/// Parses a comma-separated list of expressions (`key: a, b`).
pub fn parse_list(text: &str) -> Result<Vec<SqlExpr>, ExprError> {
    let mut p = parser(text)?;
    let list = p.parse_comma_separated(Parser::parse_expr).map_err(syntax)?;
    at_end(&mut p)?;
    Ok(list.into_iter().map(|ast| SqlExpr { ast: Box::new(ast) }).collect())
}

/// Parses a select list: `expr [AS name], …` or `*`.
pub fn parse_select(text: &str) -> Result<Vec<SelectItem>, ExprError> {
    let mut p = parser(text)?;
    let items = p.parse_projection().map_err(syntax)?;
    at_end(&mut p)?;
    items
        .into_iter()
        .map(|item| match item {
            AstSelectItem::Wildcard(_) => Ok(SelectItem::Star),
            AstSelectItem::ExprWithAlias { expr, alias } => {
                Ok(SelectItem::Expr { expr: SqlExpr { ast: Box::new(expr) }, name: alias.value })
            }
            AstSelectItem::UnnamedExpr(expr) => {
                let name = match &expr {
                    AstExpr::Identifier(id) => id.value.clone(),
                    AstExpr::CompoundIdentifier(parts) if !parts.is_empty() => parts[parts.len() - 1].value.clone(),
                    other => return Err(ExprError::new(format!("`{other}` needs a name: write `{other} AS name`"))),
                };
                Ok(SelectItem::Expr { expr: SqlExpr { ast: Box::new(expr) }, name })
            }
            other => Err(ExprError::new(format!("`{other}` is not supported in a select list"))),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn select_lists_name_their_columns() {
        let items = parse_select("bid_auction AS auction, `dateTime`, person.name, 0.908 * price price").unwrap();
        let names: Vec<String> = items
            .iter()
            .map(|i| match i {
                SelectItem::Star => "*".to_string(),
                SelectItem::Expr { name, .. } => name.clone(),
            })
            .collect();
        assert_eq!(names, vec!["auction", "dateTime", "name", "price"]);
        assert_eq!(parse_select("*").unwrap(), vec![SelectItem::Star]);
        let e = parse_select("a + 1").unwrap_err().to_string();
        assert!(e.contains("needs a name"), "{e}");
    }

    #[test]
    fn syntax_errors_say_where() {
        let e = parse_expr("a = = 2").unwrap_err().to_string();
        assert!(e.contains("Line: 1, Column: 5"), "{e}");
        let e = parse_expr("a = 2 b").unwrap_err().to_string();
        assert!(e.contains("unexpected `b`") && e.contains("Line: 1, Column: 7"), "{e}");
        assert!(parse_expr("   ").unwrap_err().to_string().contains("empty"));
        assert!(parse_expr("'open").is_err());
    }

    #[test]
    fn sizes_are_bounded_before_anything_recurses() {
        let chain = vec!["a"; MAX_EXPR_OPERATORS + 2].join(" + ");
        let e = parse_expr(&chain).unwrap_err().to_string();
        assert!(e.contains("operators"), "{e}");
        let ok = vec!["a"; MAX_EXPR_OPERATORS].join(" + ");
        assert!(parse_expr(&ok).is_ok());
        // The bound is per item of a list.
        assert!(parse_select(&format!("{ok} AS x, {ok} AS y")).is_ok());
        assert!(parse_select(&format!("{ok} AS x, {chain} AS y")).is_err());
        let nested = format!("{}a{}", "(".repeat(10_000), ")".repeat(10_000));
        assert!(parse_expr(&nested).unwrap_err().to_string().contains("levels deep"));
        let nots = format!("{}a", "NOT ".repeat(10_000));
        assert!(parse_expr(&nots).is_err());
        let long = "a".repeat(MAX_EXPR_TEXT + 1);
        assert!(parse_expr(&long).unwrap_err().to_string().contains("bytes"));
    }
}
