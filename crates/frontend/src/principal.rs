//! Who a TLS client is: the subject name of its certificate, written as Java's
//! `X500Principal.getName()` writes it (RFC 2253: the most specific RDN first, `CN=alice,O=acme`),
//! turned into a principal name by `ssl.principal.mapping.rules` (Kafka's `SslPrincipalMapper`:
//! `RULE:pattern/replacement/[LU]` entries and `DEFAULT`, tried in order; the first rule whose
//! pattern matches the whole name gives the principal). Without a client certificate the
//! principal is `User:ANONYMOUS`.

use regex::Regex;
use x509_parser::der_parser::oid::Oid;
use x509_parser::prelude::{FromDer, X509Certificate};

/// Kafka's default: the principal is the whole subject name.
pub const DEFAULT_MAPPING_RULES: &str = "DEFAULT";

/// Why `ssl.principal.mapping.rules` cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("ssl.principal.mapping.rules: {0}")]
pub struct MappingRulesError(String);

/// One rule: `DEFAULT`, or a pattern, its replacement and a case change.
#[derive(Debug, Clone)]
enum Rule {
    Default,
    Replace {
        pattern: Regex,
        /// The whole-name pattern (Java's `matches()`).
        whole: Regex,
        replacement: String,
        case: Case,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Case {
    Keep,
    Lower,
    Upper,
}

/// `ssl.principal.mapping.rules`, parsed.
#[derive(Debug, Clone)]
pub struct PrincipalMapper {
    rules: Vec<Rule>,
}

/// Kafka's rule grammar (`SslPrincipalMapper.RULE_PATTERN`).
const RULE_PATTERN: &str = r"(DEFAULT)|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?).*?|(.*?)";

impl PrincipalMapper {
    pub fn parse(rules: &str) -> Result<Self, MappingRulesError> {
        let bad = |e: regex::Error| MappingRulesError(e.to_string());
        let splitter = Regex::new(&format!(r"\s*({RULE_PATTERN})\s*(?:,\s*|$)")).map_err(bad)?;
        let parser = Regex::new(&format!("^(?:{RULE_PATTERN})")).map_err(bad)?;
        let mut parsed = Vec::new();
        for one in splitter
            .captures_iter(rules.trim())
            .filter_map(|c| c.get(1))
            .map(|m| m.as_str())
        {
            let Some(c) = parser.captures(one) else {
                return Err(MappingRulesError(format!("Invalid rule: {one}")));
            };
            if c.get(0).map_or(0, |m| m.end()) != one.len() {
                return Err(MappingRulesError(format!("Invalid rule: `{one}`")));
            }
            if c.get(1).is_some() {
                parsed.push(Rule::Default);
            } else if let (Some(pattern), Some(replacement)) = (c.get(2), c.get(3)) {
                let pattern = pattern.as_str();
                parsed.push(Rule::Replace {
                    pattern: Regex::new(pattern).map_err(bad)?,
                    whole: Regex::new(&format!("^(?:{pattern})$")).map_err(bad)?,
                    replacement: java_replacement(replacement.as_str()),
                    case: match c.get(4).map(|m| m.as_str()) {
                        Some("L") => Case::Lower,
                        Some("U") => Case::Upper,
                        _ => Case::Keep,
                    },
                });
            }
        }
        Ok(Self { rules: parsed })
    }

    /// The principal name for a subject name; `None` when no rule applies (Kafka refuses the
    /// connection).
    pub fn name(&self, subject: &str) -> Option<String> {
        self.rules.iter().find_map(|rule| match rule {
            Rule::Default => Some(subject.to_string()),
            Rule::Replace {
                pattern,
                whole,
                replacement,
                case,
            } => {
                if !whole.is_match(subject) {
                    return None;
                }
                let out = pattern
                    .replace_all(subject, replacement.as_str())
                    .into_owned();
                Some(match case {
                    Case::Keep => out,
                    Case::Lower => out.to_lowercase(),
                    Case::Upper => out.to_uppercase(),
                })
            }
        })
    }
}

/// A Java replacement string (`$1`, `\$`) in the regex crate's syntax (`${1}`, `$$`).
fn java_replacement(java: &str) -> String {
    let mut out = String::with_capacity(java.len() + 8);
    let mut chars = java.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some('$') => out.push_str("$$"),
                Some(other) => out.push(other),
                None => {}
            },
            '$' if chars.peek().is_some_and(char::is_ascii_digit) => {
                let mut digits = String::new();
                while let Some(d) = chars.peek().copied().filter(char::is_ascii_digit) {
                    digits.push(d);
                    chars.next();
                }
                out.push_str(&format!("${{{digits}}}"));
            }
            '$' => out.push_str("$$"),
            other => out.push(other),
        }
    }
    out
}

/// Attribute keywords Java's RFC 2253 form uses; any other attribute is `oid=#hex`.
const RFC2253_KEYWORDS: &[(&str, &str)] = &[
    ("2.5.4.3", "CN"),
    ("2.5.4.6", "C"),
    ("2.5.4.7", "L"),
    ("2.5.4.8", "ST"),
    ("2.5.4.10", "O"),
    ("2.5.4.11", "OU"),
    ("2.5.4.9", "STREET"),
    ("0.9.2342.19200300.100.1.25", "DC"),
    ("0.9.2342.19200300.100.1.1", "UID"),
];

/// The subject name of a DER certificate in RFC 2253 form; `None` when it cannot be parsed.
pub fn subject_name(cert_der: &[u8]) -> Option<String> {
    let (_, cert) = X509Certificate::from_der(cert_der).ok()?;
    let rdns: Vec<String> = cert
        .subject()
        .iter()
        .map(|rdn| {
            rdn.iter()
                .map(|attr| {
                    let oid = attr.attr_type();
                    match keyword(oid) {
                        Some(key) => match attr.as_str() {
                            Ok(value) => format!("{key}={}", escape(value)),
                            Err(_) => format!("{key}=#{}", hex(attr.attr_value().data)),
                        },
                        None => format!("{}=#{}", oid.to_id_string(), hex(attr.attr_value().data)),
                    }
                })
                .collect::<Vec<_>>()
                .join("+")
        })
        .collect();
    Some(rdns.into_iter().rev().collect::<Vec<_>>().join(","))
}

fn keyword(oid: &Oid) -> Option<&'static str> {
    let id = oid.to_id_string();
    RFC2253_KEYWORDS
        .iter()
        .find(|(o, _)| *o == id)
        .map(|(_, k)| *k)
}

/// RFC 2253 escaping of an attribute value.
fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let last = value.chars().count().saturating_sub(1);
    for (i, c) in value.chars().enumerate() {
        let special = matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';')
            || (i == 0 && (c == '#' || c == ' '))
            || (i == last && c == ' ');
        if special {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_rule_keeps_the_subject() {
        let m = PrincipalMapper::parse("DEFAULT").expect("rules");
        assert_eq!(
            m.name("CN=alice,O=acme").as_deref(),
            Some("CN=alice,O=acme")
        );
    }

    #[test]
    fn rules_apply_in_order_with_back_references_and_case() {
        let m = PrincipalMapper::parse(
            "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/, RULE:^CN=(.*?),OU=(.*?),O=.*$/$1@$2/L, DEFAULT",
        )
        .expect("rules");
        assert_eq!(
            m.name("CN=kafka-svc,OU=ServiceUsers,O=Acme").as_deref(),
            Some("kafka-svc")
        );
        assert_eq!(
            m.name("CN=Alice,OU=Sales,O=Acme").as_deref(),
            Some("alice@sales")
        );
        assert_eq!(m.name("CN=bob").as_deref(), Some("CN=bob"));
        let upper = PrincipalMapper::parse("RULE:^CN=([a-z]+)$/$1/U").expect("rules");
        assert_eq!(upper.name("CN=bob").as_deref(), Some("BOB"));
        assert_eq!(upper.name("CN=Bob,O=x"), None);
    }

    #[test]
    fn invalid_rules_are_refused() {
        assert!(PrincipalMapper::parse("RULE:^CN=(.*)$/$1/L, nonsense").is_err());
        assert!(PrincipalMapper::parse("RULE:([/$1/").is_err());
    }

    #[test]
    fn subject_names_read_most_specific_first() {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        let mut dn = rcgen::DistinguishedName::new();
        dn.push(rcgen::DnType::CountryName, "US");
        dn.push(rcgen::DnType::OrganizationName, "Acme, Inc.");
        dn.push(rcgen::DnType::CommonName, "alice");
        params.distinguished_name = dn;
        let key = rcgen::KeyPair::generate().expect("key");
        let cert = params.self_signed(&key).expect("cert");
        assert_eq!(
            subject_name(cert.der()).as_deref(),
            Some(r"CN=alice,O=Acme\, Inc.,C=US")
        );
    }
}
