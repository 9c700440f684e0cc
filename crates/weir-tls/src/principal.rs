//! Who a client with a certificate is: its subject's distinguished name as Java's
//! `X500Principal.getName()` writes it (RFC 2253: the most specific name first, `CN=client,
//! O=Acme` without spaces, special characters escaped), which Kafka's default principal
//! builder makes `User:` of.

use x509_parser::prelude::{AttributeTypeAndValue, FromDer, X509Certificate};

/// The attribute types RFC 2253 (and Java) write by keyword; any other is written as its OID.
const KEYWORDS: &[(&str, &str)] = &[
    ("2.5.4.3", "CN"),
    ("2.5.4.6", "C"),
    ("2.5.4.7", "L"),
    ("2.5.4.8", "ST"),
    ("2.5.4.9", "STREET"),
    ("2.5.4.10", "O"),
    ("2.5.4.11", "OU"),
    ("0.9.2342.19200300.100.1.1", "UID"),
    ("0.9.2342.19200300.100.1.25", "DC"),
];

/// The RFC 2253 name of the subject of the certificate `der`, if it is one.
pub fn subject_name(der: &[u8]) -> Option<String> {
    let (_, certificate) = X509Certificate::from_der(der).ok()?;
    let rdns: Vec<String> = certificate
        .subject()
        .iter()
        .map(|rdn| rdn.iter().map(attribute).collect::<Vec<_>>().join("+"))
        .collect();
    Some(rdns.into_iter().rev().collect::<Vec<_>>().join(","))
}

/// One `TYPE=value`: a keyword's string value escaped, anything else `OID=#` and the value's
/// DER in hex, as RFC 2253 writes a value it has no string form for.
fn attribute(attribute: &AttributeTypeAndValue<'_>) -> String {
    let oid = attribute.attr_type().to_id_string();
    let keyword = KEYWORDS.iter().find(|(id, _)| *id == oid).map(|(_, k)| *k);
    match (keyword, attribute.as_str()) {
        (Some(keyword), Ok(value)) => format!("{keyword}={}", escape(value)),
        _ => {
            let value = attribute.attr_value();
            let der = tlv(value.tag().0 as u8, value.data);
            let hex: String = der.iter().map(|b| format!("{b:02x}")).collect();
            format!("{}=#{hex}", keyword.map_or(oid.as_str(), |k| k))
        }
    }
}

/// RFC 2253's escaping: `,+"\<>;` anywhere, `#` or a space first, a space last.
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

/// A primitive universal DER value: tag, length, contents.
fn tlv(tag: u8, data: &[u8]) -> Vec<u8> {
    let mut der = vec![tag];
    match data.len() {
        len @ 0..=127 => der.push(len as u8),
        len => {
            let bytes: Vec<u8> = len
                .to_be_bytes()
                .into_iter()
                .skip_while(|b| *b == 0)
                .collect();
            der.push(0x80 | bytes.len() as u8);
            der.extend(bytes);
        }
    }
    der.extend_from_slice(data);
    der
}

#[cfg(test)]
mod tests {
    use super::*;

    fn certificate(subject: &[(rcgen::DnType, &str)]) -> Vec<u8> {
        let mut params = rcgen::CertificateParams::new(Vec::new()).expect("params");
        let mut name = rcgen::DistinguishedName::new();
        for (kind, value) in subject {
            name.push(kind.clone(), *value);
        }
        params.distinguished_name = name;
        let key = rcgen::KeyPair::generate().expect("key");
        params
            .self_signed(&key)
            .expect("certificate")
            .der()
            .to_vec()
    }

    #[test]
    fn the_subject_is_written_most_specific_first_as_java_writes_it() {
        use rcgen::DnType;
        let der = certificate(&[
            (DnType::CountryName, "US"),
            (DnType::OrganizationName, "Acme, Inc."),
            (DnType::OrganizationalUnitName, "eng"),
            (DnType::CommonName, "client-1"),
        ]);
        assert_eq!(
            subject_name(&der).as_deref(),
            Some("CN=client-1,OU=eng,O=Acme\\, Inc.,C=US")
        );
        let der = certificate(&[(DnType::CommonName, " #lead+trail ")]);
        assert_eq!(
            subject_name(&der).as_deref(),
            Some("CN=\\ #lead\\+trail\\ ")
        );
        let email = DnType::CustomDnType(vec![1, 2, 840, 113549, 1, 9, 1]);
        let der = certificate(&[(DnType::CommonName, "c"), (email, "a@b")]);
        let name = subject_name(&der).expect("name");
        assert!(name.starts_with("1.2.840.113549.1.9.1=#"), "{name}");
        assert!(name.ends_with(",CN=c"), "{name}");
        assert_eq!(subject_name(b"not a certificate"), None);
    }
}
