//! A script's text to its statements, read as Flink reads them: `;`-separated, `--` and `/* */` comments, and
//! Flink's DDL that sqlparser does not know — computed columns (`name AS expr`), `WATERMARK FOR col AS expr`,
//! `ROW<…>` types, `SET 'key' = 'value'` — taken apart from the token stream, so that every error keeps the line
//! and column of the script it points at.

use super::error::SqlError;
use sqlparser::ast::{Expr as AstExpr, Statement};
use sqlparser::dialect::GenericDialect;
use sqlparser::keywords::Keyword;
use sqlparser::parser::Parser;
use sqlparser::tokenizer::{Location, Token, TokenWithSpan, Tokenizer, Word};

/// The most statements a script may have.
pub const MAX_STATEMENTS: usize = 1_000;

/// The most tokens a script may have (a bound on everything the planner does with it).
pub const MAX_SCRIPT_TOKENS: usize = 200_000;

/// The most operators one statement may have: the planner recurses once per level of an expression's tree (a
/// chain `a + b + …` is a level per operator), and DataFusion's planning of a chain takes time in the square of
/// its length (0.8 s for 1,000 operators, 7 s for 3,000).
pub const MAX_STATEMENT_OPERATORS: usize = 1_024;

/// The deepest nesting the parser accepts (parentheses, subqueries, function calls).
pub const MAX_NESTING: usize = 64;

/// One statement of a script.
#[derive(Debug)]
pub(crate) enum Stmt {
    /// `SET 'key' = 'value'`.
    Set { key: String, value: String, at: Location },
    /// `CREATE TABLE … WITH (…)`.
    CreateTable(Box<TableDdl>),
    /// `CREATE VIEW name AS query`, and the window functions its query calls.
    CreateView { statement: Box<Statement>, windows: Vec<WindowCall>, at: Location },
    /// `INSERT INTO table SELECT …`, and the window functions its query calls.
    Insert { statement: Box<Statement>, windows: Vec<WindowCall>, at: Location },
}

/// Flink's window table-valued functions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WindowFunction {
    /// `TUMBLE(TABLE t, DESCRIPTOR(time), size [, offset])`.
    Tumble,
    /// `HOP(TABLE t, DESCRIPTOR(time), slide, size [, offset])`.
    Hop,
    /// `CUMULATE(TABLE t, DESCRIPTOR(time), step, size [, offset])`.
    Cumulate,
    /// `SESSION(TABLE t [PARTITION BY cols], DESCRIPTOR(time), gap)`.
    Session,
}

impl WindowFunction {
    fn named(name: &str) -> Option<Self> {
        match name.to_ascii_uppercase().as_str() {
            "TUMBLE" => Some(WindowFunction::Tumble),
            "HOP" => Some(WindowFunction::Hop),
            "CUMULATE" => Some(WindowFunction::Cumulate),
            "SESSION" => Some(WindowFunction::Session),
            _ => None,
        }
    }

    /// How many intervals it takes: the fewest and the most.
    pub fn arity(self) -> (usize, usize) {
        match self {
            WindowFunction::Session => (1, 1),
            WindowFunction::Tumble => (1, 2),
            WindowFunction::Hop | WindowFunction::Cumulate => (2, 3),
        }
    }

    /// Its name in SQL.
    pub fn name(self) -> &'static str {
        match self {
            WindowFunction::Tumble => "TUMBLE",
            WindowFunction::Hop => "HOP",
            WindowFunction::Cumulate => "CUMULATE",
            WindowFunction::Session => "SESSION",
        }
    }
}

/// A window table-valued function a query reads from, `TABLE(HOP(TABLE bid, DESCRIPTOR(dateTime), INTERVAL …))`:
/// taken out of the token stream (sqlparser cannot read `TABLE bid` as an argument) and replaced by a name that
/// the planner resolves to the windowed table (the table's columns, then `window_start`, `window_end` and
/// `window_time`).
#[derive(Clone, Debug)]
pub(crate) struct WindowCall {
    /// The name standing for the call in the query: the function, the table and where the call is.
    pub name: String,
    /// Which function.
    pub function: WindowFunction,
    /// The table or view it windows.
    pub table: String,
    /// `SESSION`'s `PARTITION BY` columns.
    pub partition_by: Vec<String>,
    /// `DESCRIPTOR(column)`: the time attribute.
    pub time_column: String,
    /// The sizes (intervals), in order.
    pub args: Vec<AstExpr>,
    /// Where the call is.
    pub at: Location,
}

/// A `CREATE TABLE`: its plain columns as sqlparser reads them, and what Flink adds.
#[derive(Debug)]
pub(crate) struct TableDdl {
    /// The table's name.
    pub name: String,
    /// Where the statement starts.
    pub at: Location,
    /// `CREATE TABLE name (plain columns)`.
    pub create: Statement,
    /// Computed columns, in order: name, expression, and where each is.
    pub computed: Vec<(String, AstExpr, Location)>,
    /// `WATERMARK FOR column AS expr`.
    pub watermark: Option<(String, AstExpr, Location)>,
    /// The `WITH` options, in order.
    pub options: Vec<(String, String, Location)>,
}

fn dialect() -> &'static GenericDialect {
    static D: GenericDialect = GenericDialect {};
    &D
}

fn err_at(at: Location, message: impl Into<String>) -> SqlError {
    SqlError::at(at, message)
}

fn parse_error(e: sqlparser::parser::ParserError) -> SqlError {
    if let sqlparser::parser::ParserError::RecursionLimitExceeded = e {
        return SqlError::plain(format!(
            "parentheses, subqueries and function calls nest too many levels deep (the parser's limit is \
             {MAX_NESTING})"
        ));
    }
    let m = e.to_string();
    SqlError::plain(m.strip_prefix("sql parser error: ").unwrap_or(&m))
}

fn is_keyword(t: &TokenWithSpan, k: Keyword) -> bool {
    matches!(&t.token, Token::Word(w) if w.keyword == k && w.quote_style.is_none())
}

fn eof(at: Location) -> TokenWithSpan {
    TokenWithSpan::at(Token::EOF, at, at)
}

fn parser(tokens: Vec<TokenWithSpan>) -> Parser<'static> {
    Parser::new(dialect()).with_recursion_limit(MAX_NESTING).with_tokens_with_locations(tokens)
}

/// Splits a script into its statements (comments and blank statements dropped).
pub(crate) fn statements(text: &str) -> Result<Vec<Stmt>, SqlError> {
    let tokens =
        Tokenizer::new(dialect(), text).tokenize_with_location().map_err(|e| SqlError::plain(e.to_string()))?;
    if tokens.len() > MAX_SCRIPT_TOKENS {
        return Err(SqlError::plain(format!(
            "the script has {} tokens, over the limit of {MAX_SCRIPT_TOKENS}",
            tokens.len()
        )));
    }
    let mut out = Vec::new();
    let mut current: Vec<TokenWithSpan> = Vec::new();
    for t in tokens {
        match &t.token {
            Token::Whitespace(_) => {}
            Token::SemiColon => {
                if !current.is_empty() {
                    out.push(statement(std::mem::take(&mut current), t.span.start)?);
                }
            }
            _ => current.push(t),
        }
        if out.len() > MAX_STATEMENTS {
            return Err(SqlError::plain(format!("the script has over {MAX_STATEMENTS} statements")));
        }
    }
    if let Some(last) = current.last() {
        let end = last.span.end;
        out.push(statement(current, end)?);
    }
    Ok(out)
}

/// One statement's tokens (no whitespace, no `;`) to what it says.
fn statement(mut tokens: Vec<TokenWithSpan>, end: Location) -> Result<Stmt, SqlError> {
    let at = tokens[0].span.start;
    let operators = tokens.iter().filter(|t| crate::expr::parse::is_operator(&t.token)).count();
    if operators > MAX_STATEMENT_OPERATORS {
        return Err(err_at(
            at,
            format!("a statement of {operators} operators: at most {MAX_STATEMENT_OPERATORS} are accepted"),
        ));
    }
    let word = |tokens: &[TokenWithSpan], i: usize| {
        tokens.get(i).and_then(|t| if let Token::Word(w) = &t.token { Some(w.keyword) } else { None })
    };
    match word(&tokens, 0) {
        Some(Keyword::SET) => set(&tokens),
        Some(Keyword::CREATE) => {
            // Flink's TEMPORARY tables and views are the job's own, as every table of a script is here.
            if word(&tokens, 1) == Some(Keyword::TEMPORARY) {
                tokens.remove(1);
            }
            match word(&tokens, 1) {
                Some(Keyword::TABLE) => Ok(Stmt::CreateTable(Box::new(create_table(tokens, end)?))),
                Some(Keyword::VIEW) => {
                    let windows = window_calls(&mut tokens)?;
                    tokens.push(eof(end));
                    let statement = parser(tokens).parse_statement().map_err(parse_error)?;
                    Ok(Stmt::CreateView { statement: Box::new(statement), windows, at })
                }
                _ => Err(err_at(at, "Weir runs CREATE TABLE and CREATE VIEW; not this CREATE")),
            }
        }
        Some(Keyword::INSERT) => {
            let windows = window_calls(&mut tokens)?;
            tokens.push(eof(end));
            let mut p = parser(tokens);
            let statement = p.parse_statement().map_err(parse_error)?;
            Ok(Stmt::Insert { statement: Box::new(statement), windows, at })
        }
        _ => Err(err_at(
            at,
            format!(
                "`{}`: a script holds SET, CREATE TABLE, CREATE VIEW and one INSERT INTO … SELECT (a bare query has \
                 nowhere to go: INSERT it into a table)",
                tokens[0].token
            ),
        )),
    }
}

/// Takes each `TABLE(<window function>(…))` out of a query's tokens, leaving a name in its place.
fn window_calls(tokens: &mut Vec<TokenWithSpan>) -> Result<Vec<WindowCall>, SqlError> {
    let mut calls = Vec::new();
    let mut i = 0;
    while i + 3 < tokens.len() {
        let function = match &tokens[i + 2].token {
            Token::Word(w) if w.quote_style.is_none() => WindowFunction::named(&w.value),
            _ => None,
        };
        let (Some(function), true, true, true) = (
            function,
            is_keyword(&tokens[i], Keyword::TABLE),
            tokens[i + 1].token == Token::LParen,
            tokens[i + 3].token == Token::LParen,
        ) else {
            i += 1;
            continue;
        };
        let at = tokens[i + 2].span.start;
        let (args, close) = items(tokens, i + 3)?;
        if tokens.get(close + 1).map(|t| &t.token) != Some(&Token::RParen) {
            return Err(err_at(tokens[i + 1].span.start, "this parenthesis is never closed"));
        }
        let call = window_call(function, args, at)?;
        let name = Token::Word(Word { value: call.name.clone(), quote_style: Some('`'), keyword: Keyword::NoKeyword });
        let span = tokens[i].span;
        tokens.splice(i..close + 2, [TokenWithSpan::new(name, span)]);
        calls.push(call);
        i += 1;
    }
    Ok(calls)
}

/// A window function's arguments: `TABLE t [PARTITION BY c | (c, …)]`, `DESCRIPTOR(column)`, then intervals.
fn window_call(function: WindowFunction, args: Vec<Vec<TokenWithSpan>>, at: Location) -> Result<WindowCall, SqlError> {
    let usage = match function {
        WindowFunction::Tumble => "TUMBLE(TABLE t, DESCRIPTOR(time column), size [, offset])",
        WindowFunction::Hop => "HOP(TABLE t, DESCRIPTOR(time column), slide, size [, offset])",
        WindowFunction::Cumulate => "CUMULATE(TABLE t, DESCRIPTOR(time column), step, size [, offset])",
        WindowFunction::Session => "SESSION(TABLE t [PARTITION BY columns], DESCRIPTOR(time column), gap)",
    };
    let refuse = |at: Location| err_at(at, format!("Weir reads {usage}"));
    let mut args = args.into_iter();
    let data = args.next().unwrap_or_default();
    let (table, partition_by) = match data.as_slice() {
        [t, name, rest @ ..] if is_keyword(t, Keyword::TABLE) => {
            let table = ident(name).ok_or_else(|| refuse(name.span.start))?;
            let partition_by = match rest {
                [] => Vec::new(),
                [p, b, cols @ ..]
                    if function == WindowFunction::Session
                        && is_keyword(p, Keyword::PARTITION)
                        && is_keyword(b, Keyword::BY) =>
                {
                    let names: Vec<String> = cols
                        .iter()
                        .filter(|t| !matches!(t.token, Token::LParen | Token::RParen | Token::Comma))
                        .map(|t| ident(t).ok_or_else(|| refuse(t.span.start)))
                        .collect::<Result<_, _>>()?;
                    if names.is_empty() {
                        return Err(refuse(b.span.end));
                    }
                    names
                }
                [t, ..] => return Err(refuse(t.span.start)),
            };
            (table, partition_by)
        }
        [t, ..] => return Err(refuse(t.span.start)),
        [] => return Err(refuse(at)),
    };
    let descriptor = args.next().unwrap_or_default();
    let time_column = match descriptor.as_slice() {
        [d, open, c, close]
            if matches!(&d.token, Token::Word(w) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case("DESCRIPTOR"))
                && open.token == Token::LParen
                && close.token == Token::RParen =>
        {
            ident(c).ok_or_else(|| refuse(c.span.start))?
        }
        [t, ..] => return Err(refuse(t.span.start)),
        [] => return Err(refuse(at)),
    };
    let sizes: Vec<AstExpr> = args.map(|a| expr_of(a, at)).collect::<Result<_, _>>()?;
    let (least, most) = function.arity();
    if sizes.len() < least || sizes.len() > most {
        return Err(refuse(at));
    }
    let name = format!("{}({table})@{}:{}", function.name(), at.line, at.column);
    Ok(WindowCall { name, function, table, partition_by, time_column, args: sizes, at })
}

/// `SET 'key' = 'value'` (Flink's form; the quotes may be left out of a key).
fn set(tokens: &[TokenWithSpan]) -> Result<Stmt, SqlError> {
    let at = tokens[0].span.start;
    let text = |t: &TokenWithSpan| match &t.token {
        Token::SingleQuotedString(s) | Token::DoubleQuotedString(s) => Some(s.clone()),
        _ => None,
    };
    match tokens {
        [_, k, eq, v] if eq.token == Token::Eq => {
            let key = text(k).or_else(|| if let Token::Word(w) = &k.token { Some(w.value.clone()) } else { None });
            match (key, text(v)) {
                (Some(key), Some(value)) => Ok(Stmt::Set { key, value, at }),
                _ => Err(err_at(at, "SET takes 'key' = 'value'")),
            }
        }
        _ => Err(err_at(at, "SET takes 'key' = 'value'")),
    }
}

/// Whether the token opens angle brackets of a type (`ROW<`, `ARRAY<`, `MAP<`).
fn opens_type(prev: Option<&TokenWithSpan>) -> bool {
    matches!(prev.map(|t| &t.token), Some(Token::Word(w)) if matches!(w.keyword, Keyword::ROW | Keyword::STRUCT | Keyword::ARRAY | Keyword::MAP | Keyword::MULTISET))
}

/// The items of a parenthesised list starting at `tokens[open]` (a `(`), split at its top-level commas, and the
/// index of its `)`.
fn items(tokens: &[TokenWithSpan], open: usize) -> Result<(Vec<Vec<TokenWithSpan>>, usize), SqlError> {
    let mut depth = 0usize;
    let mut angles = 0usize;
    let mut out = vec![Vec::new()];
    for i in open..tokens.len() {
        let t = &tokens[i];
        match &t.token {
            Token::LParen => {
                depth += 1;
                if depth == 1 {
                    continue;
                }
            }
            Token::RParen => {
                depth -= 1;
                if depth == 0 {
                    return Ok((out, i));
                }
            }
            Token::Lt if opens_type(i.checked_sub(1).and_then(|j| tokens.get(j))) => angles += 1,
            Token::Gt if angles > 0 => angles -= 1,
            Token::ShiftRight if angles > 0 => angles = angles.saturating_sub(2),
            Token::Comma if depth == 1 && angles == 0 => {
                out.push(Vec::new());
                continue;
            }
            _ => {}
        }
        if let Some(last) = out.last_mut() {
            last.push(t.clone());
        }
    }
    Err(err_at(tokens[open].span.start, "this parenthesis is never closed"))
}

/// Flink's `ROW<…>` is sqlparser's `STRUCT<…>`.
fn row_as_struct(tokens: &mut [TokenWithSpan]) {
    for i in 0..tokens.len().saturating_sub(1) {
        if is_keyword(&tokens[i], Keyword::ROW) && tokens[i + 1].token == Token::Lt {
            tokens[i].token = Token::Word(Word { value: "STRUCT".into(), quote_style: None, keyword: Keyword::STRUCT });
        }
    }
}

fn expr_of(mut tokens: Vec<TokenWithSpan>, at: Location) -> Result<AstExpr, SqlError> {
    if tokens.is_empty() {
        return Err(err_at(at, "an expression is missing"));
    }
    let end = tokens[tokens.len() - 1].span.end;
    tokens.push(eof(end));
    let mut p = parser(tokens);
    let e = p.parse_expr().map_err(parse_error)?;
    let next = p.peek_token();
    if next.token != Token::EOF {
        return Err(err_at(next.span.start, format!("unexpected `{}`", next.token)));
    }
    Ok(e)
}

fn ident(t: &TokenWithSpan) -> Option<String> {
    match &t.token {
        Token::Word(w) => Some(w.value.clone()),
        _ => None,
    }
}

/// `CREATE TABLE name (columns, computed columns, WATERMARK FOR …) WITH ('k' = 'v', …)`.
fn create_table(tokens: Vec<TokenWithSpan>, end: Location) -> Result<TableDdl, SqlError> {
    let at = tokens[0].span.start;
    let Some(open) = tokens.iter().position(|t| t.token == Token::LParen) else {
        return Err(err_at(at, "CREATE TABLE needs its columns in parentheses"));
    };
    let (columns, close) = items(&tokens, open)?;
    let mut plain: Vec<TokenWithSpan> = tokens[..=open].to_vec();
    let mut computed = Vec::new();
    let mut watermark = None;
    for mut item in columns {
        let Some(first) = item.first().cloned() else {
            return Err(err_at(tokens[open].span.start, "an empty column in the list"));
        };
        if matches!(&first.token, Token::Word(w) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case("WATERMARK"))
        {
            if !item.get(1).is_some_and(|t| is_keyword(t, Keyword::FOR))
                || !item.get(3).is_some_and(|t| is_keyword(t, Keyword::AS))
            {
                return Err(err_at(first.span.start, "a watermark reads WATERMARK FOR column AS expression"));
            }
            let column = ident(&item[2]).ok_or_else(|| err_at(item[2].span.start, "WATERMARK FOR needs a column"))?;
            if watermark.is_some() {
                return Err(err_at(first.span.start, "a table has at most one WATERMARK"));
            }
            let expr = expr_of(item.split_off(4), first.span.start)?;
            watermark = Some((column, expr, first.span.start));
        } else if item.get(1).is_some_and(|t| is_keyword(t, Keyword::AS)) {
            let name = ident(&first).ok_or_else(|| err_at(first.span.start, "a computed column needs a name"))?;
            let expr = expr_of(item.split_off(2), first.span.start)?;
            computed.push((name, expr, first.span.start));
        } else if is_keyword(&first, Keyword::PRIMARY) || is_keyword(&first, Keyword::CONSTRAINT) {
            return Err(err_at(first.span.start, "PRIMARY KEY and constraints are not supported yet"));
        } else {
            if plain.len() > open + 1 {
                plain.push(TokenWithSpan::at(Token::Comma, first.span.start, first.span.start));
            }
            row_as_struct(&mut item);
            plain.extend(item);
        }
    }
    plain.push(tokens[close].clone());
    let name = plain.iter().take(open).rev().find_map(ident).ok_or_else(|| err_at(at, "CREATE TABLE needs a name"))?;
    let options = with_options(&tokens[close + 1..], tokens[close].span.end)?;
    plain.push(eof(end));
    let create = parser(plain).parse_statement().map_err(parse_error)?;
    Ok(TableDdl { name, at, create, computed, watermark, options })
}

/// `WITH ('key' = 'value', …)`, the only clause Weir reads after a table's columns.
fn with_options(tokens: &[TokenWithSpan], after: Location) -> Result<Vec<(String, String, Location)>, SqlError> {
    let Some(first) = tokens.first() else {
        return Err(err_at(after, "a table needs WITH ('connector' = …)"));
    };
    if !is_keyword(first, Keyword::WITH) {
        return Err(err_at(
            first.span.start,
            format!("`{}`: only WITH ('key' = 'value', …) may follow a table's columns", first.token),
        ));
    }
    if tokens.get(1).map(|t| &t.token) != Some(&Token::LParen) {
        return Err(err_at(first.span.end, "WITH needs ('key' = 'value', …)"));
    }
    let (list, close) = items(tokens, 1)?;
    if let Some(extra) = tokens.get(close + 1) {
        return Err(err_at(extra.span.start, format!("unexpected `{}` after the WITH options", extra.token)));
    }
    let mut out = Vec::new();
    for item in list {
        if item.is_empty() && out.is_empty() {
            continue;
        }
        match item.as_slice() {
            [k, eq, v] if eq.token == Token::Eq => match (&k.token, &v.token) {
                (Token::SingleQuotedString(k2), Token::SingleQuotedString(v2)) => {
                    out.push((k2.clone(), v2.clone(), k.span.start))
                }
                _ => return Err(err_at(k.span.start, "an option is 'key' = 'value', both quoted")),
            },
            [t, ..] => return Err(err_at(t.span.start, "an option is 'key' = 'value'")),
            [] => return Err(err_at(first.span.start, "an empty option")),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flink_ddl_is_taken_apart_with_its_positions() {
        let text = "-- a table\nSET 'parallelism.default' = '2';\nCREATE TABLE t (\n  a INT,\n  r ROW<x BIGINT, \
                    `y` ROW<z VARCHAR>>,\n  ts AS CASE a WHEN 0 THEN r.x ELSE 1 END,\n  WATERMARK FOR ts AS ts - \
                    INTERVAL '4' SECOND\n) WITH ('connector' = 'nexmark', 'events' = '10');\n\nINSERT INTO s SELECT a \
                    FROM t;";
        let s = statements(text).unwrap();
        assert_eq!(s.len(), 3);
        let Stmt::Set { key, value, .. } = &s[0] else { panic!("{s:?}") };
        assert_eq!((key.as_str(), value.as_str()), ("parallelism.default", "2"));
        let Stmt::CreateTable(t) = &s[1] else { panic!() };
        assert_eq!(t.name, "t");
        assert_eq!(t.computed.len(), 1);
        assert_eq!(t.computed[0].0, "ts");
        assert_eq!(t.watermark.as_ref().unwrap().0, "ts");
        assert_eq!(
            t.options.iter().map(|(k, v, _)| format!("{k}={v}")).collect::<Vec<_>>(),
            ["connector=nexmark", "events=10"]
        );
        assert!(t.create.to_string().contains("STRUCT<x BIGINT, `y` STRUCT<z VARCHAR>>"), "{}", t.create);
        assert!(matches!(s[2], Stmt::Insert { .. }));
    }

    #[test]
    fn errors_point_at_the_line_and_column_of_the_script() {
        let e = statements("SET 'a' = 'b';\nCREATE TABLE t (a INT) WITH ('x' = 'y');\nINSERT INTO s SELEC a FROM t")
            .unwrap_err()
            .to_string();
        assert!(e.contains("Line: 3"), "{e}");
        let e = statements("\n\n  SELECT 1").unwrap_err().to_string();
        assert!(e.starts_with("line 3, column 3:"), "{e}");
        let e = statements("CREATE TABLE t (a INT, WATERMARK a) WITH ('connector' = 'x')").unwrap_err().to_string();
        assert!(e.contains("WATERMARK FOR"), "{e}");
        let e = statements("CREATE TABLE t (a INT").unwrap_err().to_string();
        assert!(e.contains("never closed"), "{e}");
        let e = statements("CREATE TABLE t (a INT) WITH ('connector' = nexmark)").unwrap_err().to_string();
        assert!(e.contains("both quoted"), "{e}");
        let deep = format!("INSERT INTO s SELECT {}1{} FROM t", "(".repeat(5000), ")".repeat(5000));
        assert!(statements(&deep).unwrap_err().to_string().contains("levels deep"));
    }
}
