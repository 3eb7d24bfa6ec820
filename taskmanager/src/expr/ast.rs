//! The expression tree that parsing builds, typing checks and evaluation runs.

/// A parsed expression.
#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    /// A column of the input, by name.
    Column(String),
    /// A constant.
    Literal(Literal),
    /// `-x` or `NOT x`.
    Unary(UnaryOp, Box<Expr>),
    /// `a op b`.
    Binary(BinaryOp, Box<Expr>, Box<Expr>),
    /// `x IS NULL` (`negated`: `IS NOT NULL`).
    IsNull {
        /// The tested expression.
        expr: Box<Expr>,
        /// `IS NOT NULL`.
        negated: bool,
    },
    /// A function of the language applied to its arguments.
    Call(Function, Vec<Expr>),
    /// `x IN (c1, c2, …)` over constants (`negated`: `NOT IN`).
    InList {
        /// The tested expression.
        expr: Box<Expr>,
        /// The constants.
        list: Vec<Literal>,
        /// `NOT IN`.
        negated: bool,
    },
}

/// A constant of the language.
#[derive(Clone, Debug, PartialEq)]
pub enum Literal {
    /// `NULL`.
    Null,
    /// `TRUE` or `FALSE`.
    Bool(bool),
    /// An integer (`123`).
    Int(i64),
    /// A decimal (`0.908`: unscaled 908, precision 3, scale 3).
    Decimal {
        /// The digits as an integer.
        unscaled: i128,
        /// Digits in all.
        precision: u8,
        /// Digits after the point.
        scale: i8,
    },
    /// A double (`1e3`, `2.5e-1`).
    Float(f64),
    /// A string (`'OR'`, with `''` for a quote inside).
    Str(String),
}

/// A function of the language.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Function {
    /// `KEY_INT(key)`: the integer a key made of one integer holds (`project`'s `key: id` writes it as its 8
    /// big-endian bytes, as `datagen` does); null for a key of another length. How a keyed result (a window
    /// aggregate's `key`, say) gets its grouping column back.
    KeyInt,
}

impl Function {
    /// The function a name (any case) calls, with the number of arguments it takes.
    pub fn named(name: &str) -> Option<(Function, usize)> {
        name.eq_ignore_ascii_case("KEY_INT").then_some((Function::KeyInt, 1))
    }

    /// Its name as written.
    pub fn name(self) -> &'static str {
        match self {
            Function::KeyInt => "KEY_INT",
        }
    }
}

/// A unary operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnaryOp {
    /// Arithmetic negation.
    Neg,
    /// Logical negation.
    Not,
}

/// A binary operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinaryOp {
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `*`
    Mul,
    /// `/`
    Div,
    /// `%` (or `MOD(a, b)`)
    Rem,
    /// `=`
    Eq,
    /// `<>` or `!=`
    NotEq,
    /// `<`
    Lt,
    /// `<=`
    LtEq,
    /// `>`
    Gt,
    /// `>=`
    GtEq,
    /// `AND`
    And,
    /// `OR`
    Or,
}

impl BinaryOp {
    /// Whether it compares two values.
    pub fn is_comparison(self) -> bool {
        matches!(self, BinaryOp::Eq | BinaryOp::NotEq | BinaryOp::Lt | BinaryOp::LtEq | BinaryOp::Gt | BinaryOp::GtEq)
    }

    /// Whether it is arithmetic.
    pub fn is_arithmetic(self) -> bool {
        matches!(self, BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Div | BinaryOp::Rem)
    }
}

impl Expr {
    /// The input columns it reads, in order of first appearance.
    pub fn columns(&self) -> Vec<&str> {
        let mut out = Vec::new();
        self.visit_columns(&mut |c| {
            if !out.contains(&c) {
                out.push(c)
            }
        });
        out
    }

    fn visit_columns<'a>(&'a self, f: &mut impl FnMut(&'a str)) {
        match self {
            Expr::Column(c) => f(c),
            Expr::Literal(_) => {}
            Expr::Unary(_, e) | Expr::IsNull { expr: e, .. } | Expr::InList { expr: e, .. } => e.visit_columns(f),
            Expr::Binary(_, a, b) => {
                a.visit_columns(f);
                b.visit_columns(f);
            }
            Expr::Call(_, args) => args.iter().for_each(|a| a.visit_columns(f)),
        }
    }
}
