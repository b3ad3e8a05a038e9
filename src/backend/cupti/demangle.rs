//! A kernel's function name out of its Itanium-mangled symbol (`_ZN4gemm6kernelIfEEvPT_i`
//! → `gemm::kernel`): the nested names, without template arguments or parameters. Not a
//! full demangler (no C++ demangling crate is available offline): a symbol it does not
//! recognise (an `extern "C"` name, a form it does not parse) comes back unchanged.

use std::borrow::Cow;

/// `symbol`'s qualified function name, or `symbol` itself.
pub(super) fn function_name(symbol: &str) -> Cow<'_, str> {
    parse(symbol).map_or(Cow::Borrowed(symbol), Cow::Owned)
}

fn parse(symbol: &str) -> Option<String> {
    let mut rest = symbol.strip_prefix("_Z")?.as_bytes();
    let nested = rest.first() == Some(&b'N');
    if nested {
        rest = &rest[1..];
        // CV and ref qualifiers of a member function.
        while let Some((b'K' | b'V' | b'r' | b'R' | b'O', tail)) = rest.split_first() {
            rest = tail;
        }
    }
    let mut parts: Vec<&str> = Vec::new();
    if let Some(tail) = rest.strip_prefix(b"St") {
        parts.push("std");
        rest = tail;
    }
    loop {
        let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
        if digits == 0 {
            break;
        }
        let len: usize = std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()?;
        let name = rest.get(digits..digits + len)?;
        parts.push(std::str::from_utf8(name).ok()?);
        rest = &rest[digits + len..];
        if !nested {
            break;
        }
        // Template arguments of a nested name part: skip to the next name part or the end.
        if rest.first() == Some(&b'I') {
            rest = skip_template_args(rest)?;
        }
        if rest.first() == Some(&b'E') {
            break;
        }
    }
    (!parts.is_empty()).then(|| parts.join("::"))
}

/// Skips `I ... E`, nested ones included.
fn skip_template_args(mut rest: &[u8]) -> Option<&[u8]> {
    let mut depth = 0usize;
    loop {
        let (&b, tail) = rest.split_first()?;
        match b {
            b'I' => depth += 1,
            b'E' => {
                depth -= 1;
                if depth == 0 {
                    return Some(tail);
                }
            }
            _ => {}
        }
        rest = tail;
    }
}

#[cfg(test)]
mod tests {
    use super::function_name;

    #[test]
    fn names_come_out_of_mangled_symbols() {
        for (symbol, name) in [
            ("spin_ns", "spin_ns"),
            ("_Z6kernelPfi", "kernel"),
            ("_ZN4gemm6kernelEv", "gemm::kernel"),
            ("_ZN4gemm6kernelIfEEvPT_i", "gemm::kernel"),
            (
                "_ZN2at6native29vectorized_elementwise_kernelILi4EZZZNS0_EEEvPv",
                "at::native::vectorized_elementwise_kernel",
            ),
            ("_ZNK3foo3barEv", "foo::bar"),
            ("_ZNSt6vectorIiE4sizeEv", "std::vector::size"),
            ("_Z", "_Z"),
            ("_Z99x", "_Z99x"),
        ] {
            assert_eq!(function_name(symbol), name, "{symbol}");
        }
    }
}
