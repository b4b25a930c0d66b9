//! Topic name rules, as Kafka's `Topic.validate`: 1..=249 characters from `[a-zA-Z0-9._-]`,
//! and neither `.` nor `..`.

/// Longest legal topic name, in characters (Kafka's `Topic.MAX_NAME_LENGTH`).
pub const TOPIC_NAME_LEN_MAX: usize = 249;

/// Returns a reason when `name` is not a legal topic name.
pub fn validate_topic_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("Topic name is illegal, it can't be empty".into());
    }
    if name == "." || name == ".." {
        return Err("Topic name cannot be \".\" or \"..\"".into());
    }
    if name.len() > TOPIC_NAME_LEN_MAX {
        return Err(format!(
            "Topic name is illegal, it can't be longer than {TOPIC_NAME_LEN_MAX} characters"
        ));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(format!(
            "Topic name \"{name}\" is illegal, it contains a character other than ASCII alphanumerics, '.', '_' and '-' ({c:?})"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(name: &str, ok: bool) {
        assert_eq!(validate_topic_name(name).is_ok(), ok, "{name:?}");
    }

    #[test]
    fn names() {
        check("orders", true);
        check("a.b_c-D9", true);
        check("", false);
        check(".", false);
        check("..", false);
        check("has space", false);
        check("slash/", false);
        check(&"x".repeat(249), true);
        check(&"x".repeat(250), false);
    }
}
