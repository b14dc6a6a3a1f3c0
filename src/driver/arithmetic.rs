//! The calculator's arithmetic: numbers, `+ - * / % ^`, unary minus and parentheses, with the
//! usual precedence (`^` binds tightest and to the right). Division by zero, and anything that
//! is not arithmetic, is an error the model reads.

/// Deep enough for any real expression; a deeper one is refused instead of overflowing the stack.
const MAX_DEPTH: usize = 64;

pub fn evaluate(expression: &str) -> Result<f64, String> {
    let mut parser = Parser {
        bytes: expression.as_bytes(),
        at: 0,
        depth: 0,
    };
    let value = parser.sum()?;
    parser.skip_spaces();
    if parser.at < parser.bytes.len() {
        return Err(format!(
            "unexpected '{}' at {} in the expression",
            char::from(parser.bytes[parser.at]),
            parser.at + 1
        ));
    }
    if !value.is_finite() {
        return Err("the result is too large".into());
    }
    Ok(value)
}

struct Parser<'a> {
    bytes: &'a [u8],
    at: usize,
    depth: usize,
}

impl Parser<'_> {
    fn skip_spaces(&mut self) {
        while self.bytes.get(self.at).is_some_and(u8::is_ascii_whitespace) {
            self.at += 1;
        }
    }

    /// The next operator among `ops`, taken.
    fn operator(&mut self, ops: &[u8]) -> Option<u8> {
        self.skip_spaces();
        let op = *self.bytes.get(self.at)?;
        ops.contains(&op).then(|| {
            self.at += 1;
            op
        })
    }

    fn sum(&mut self) -> Result<f64, String> {
        let mut value = self.product()?;
        while let Some(op) = self.operator(b"+-") {
            let right = self.product()?;
            value = if op == b'+' {
                value + right
            } else {
                value - right
            };
        }
        Ok(value)
    }

    fn product(&mut self) -> Result<f64, String> {
        let mut value = self.power()?;
        while let Some(op) = self.operator(b"*/%") {
            let right = self.power()?;
            if op != b'*' && right == 0.0 {
                return Err("division by zero".into());
            }
            value = match op {
                b'*' => value * right,
                b'/' => value / right,
                _ => value % right,
            };
        }
        Ok(value)
    }

    fn power(&mut self) -> Result<f64, String> {
        let base = self.unary()?;
        if self.operator(b"^").is_some() {
            let exponent = self.nested(Self::power)?;
            return Ok(base.powf(exponent));
        }
        Ok(base)
    }

    fn unary(&mut self) -> Result<f64, String> {
        if self.operator(b"-").is_some() {
            return Ok(-self.nested(Self::unary)?);
        }
        if self.operator(b"+").is_some() {
            return self.nested(Self::unary);
        }
        self.atom()
    }

    fn atom(&mut self) -> Result<f64, String> {
        self.skip_spaces();
        if self.operator(b"(").is_some() {
            let value = self.nested(Self::sum)?;
            if self.operator(b")").is_none() {
                return Err("a parenthesis is not closed".into());
            }
            return Ok(value);
        }
        let start = self.at;
        while self
            .bytes
            .get(self.at)
            .is_some_and(|b| b.is_ascii_digit() || *b == b'.')
        {
            self.at += 1;
        }
        let number = std::str::from_utf8(&self.bytes[start..self.at]).unwrap_or_default();
        number
            .parse::<f64>()
            .map_err(|_| format!("a number was expected at {} in the expression", start + 1))
    }

    fn nested(&mut self, rule: fn(&mut Self) -> Result<f64, String>) -> Result<f64, String> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err("the expression is nested too deeply".into());
        }
        let value = rule(self);
        self.depth -= 1;
        value
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn precedence_parentheses_and_powers() {
        for (expression, value) in [
            ("1 + 2 * 3", 7.0),
            ("(1 + 2) * 3", 9.0),
            ("2 ^ 3 ^ 2", 512.0),
            ("-2 ^ 2", 4.0),
            ("10 % 4 - 7 / 2", -1.5),
            ("  1.5e", f64::NAN),
        ] {
            match evaluate(expression) {
                Ok(v) => assert_eq!(v, value, "{expression}"),
                Err(_) => assert!(value.is_nan(), "{expression}"),
            }
        }
    }

    #[test]
    fn bad_expressions_are_errors_not_panics() {
        for expression in ["1 / 0", "5 % 0", "(1 + 2", "2 +", "", "abc", "9 ^ 9 ^ 9"] {
            assert!(evaluate(expression).is_err(), "{expression}");
        }
        let deep = format!("{}1{}", "(".repeat(10_000), ")".repeat(10_000));
        assert!(evaluate(&deep).is_err());
        let minus = format!("{}1", "-".repeat(10_000));
        assert!(evaluate(&minus).is_err());
    }
}
