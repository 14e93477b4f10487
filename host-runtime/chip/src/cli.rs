//! What the three command lines (`weightgen`, `weight-surgery`, `inband`) share in how
//! they speak to a user.

/// An error and its causes as one line: `outer: cause: root`, each newline a space, and a
/// cause left out when the text before it already says it (errors that embed their
/// source would otherwise print it twice).
pub fn error_line(error: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in error.chain() {
        let text = cause.to_string().replace('\n', " ");
        if line.contains(text.trim()) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn causes_are_joined_once_each() {
        let root = std::io::Error::other("No space left on device");
        let e = anyhow::Error::new(root)
            .context("writing x: No space left on device")
            .context("splice");
        assert_eq!(error_line(&e), "splice: writing x: No space left on device");
        let e = anyhow::anyhow!("two\nlines").context("outer");
        assert_eq!(error_line(&e), "outer: two lines");
    }
}
