use super::*;

const SECRET: &[u8] = b"server secret";

/// A SCRAM client as RFC 5802 describes it: (client-first, then the final message for a
/// server-first).
struct Client {
    hash: ScramHash,
    user: String,
    password: String,
    nonce: String,
}

impl Client {
    fn new(hash: ScramHash, user: &str, password: &str) -> Client {
        Client {
            hash,
            user: user.into(),
            password: password.into(),
            nonce: "fyko+d2lbbFgONRv9qkxdawL".into(),
        }
    }

    fn bare(&self) -> String {
        let name = self.user.replace('=', "=3D").replace(',', "=2C");
        format!("n={name},r={}", self.nonce)
    }

    fn first(&self) -> Vec<u8> {
        format!("n,,{}", self.bare()).into_bytes()
    }

    /// The final message, and the server signature it expects.
    fn last(&self, server_first: &[u8]) -> (Vec<u8>, String) {
        self.last_echoing(server_first, "")
    }

    /// The final message echoing `prefix` and then the server's nonce.
    fn last_echoing(&self, server_first: &[u8], prefix: &str) -> (Vec<u8>, String) {
        let server_first = std::str::from_utf8(server_first).expect("utf-8");
        let mut nonce = "";
        let mut salt = Vec::new();
        let mut iterations = 0;
        for attribute in server_first.split(',') {
            let (key, value) = attribute.split_once('=').expect("attribute");
            match key {
                "r" => nonce = value,
                "s" => salt = BASE64.decode(value).expect("salt"),
                "i" => iterations = value.parse().expect("iterations"),
                _ => {}
            }
        }
        assert!(nonce.starts_with(&self.nonce));
        let salted = self
            .hash
            .salted_password(self.password.as_bytes(), &salt, iterations);
        let without_proof = format!("c=biws,r={prefix}{nonce}");
        let auth_message = format!("{},{server_first},{without_proof}", self.bare());
        let client_key = self.hash.mac(&salted, b"Client Key");
        let signature = self
            .hash
            .mac(&self.hash.hash(&client_key), auth_message.as_bytes());
        let proof: Vec<u8> = client_key
            .iter()
            .zip(&signature)
            .map(|(k, s)| k ^ s)
            .collect();
        let server_key = self.hash.mac(&salted, b"Server Key");
        let expected = format!(
            "v={}",
            BASE64.encode(self.hash.mac(&server_key, auth_message.as_bytes()))
        );
        (
            format!("{without_proof},p={}", BASE64.encode(proof)).into_bytes(),
            expected,
        )
    }
}

fn store(hash: ScramHash, user: &str, password: &str) -> impl Fn(&str) -> Option<ScramCredential> {
    let credential = ScramCredential::new(hash, password, ITERATIONS_MIN);
    let user = user.to_string();
    move |name| (name == user).then(|| credential.clone())
}

fn exchange(
    hash: ScramHash,
    lookup: &dyn Fn(&str) -> Option<ScramCredential>,
    client: &Client,
) -> Result<String, SaslFailure> {
    let mut server = ScramServer::new(hash);
    let ScramStep::Challenge(first) = server.step(&client.first(), lookup, SECRET)? else {
        panic!("a challenge first");
    };
    let (last, expected) = client.last(&first);
    match server.step(&last, lookup, SECRET)? {
        ScramStep::Authenticated { user, response } => {
            assert_eq!(
                String::from_utf8(response).expect("utf-8"),
                expected,
                "the server proves itself"
            );
            Ok(user)
        }
        ScramStep::Challenge(_) => panic!("done after the final message"),
    }
}

#[test]
fn the_rfc_7677_example_derives_the_same_proof() {
    let hash = ScramHash::Sha256;
    let salt = BASE64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").expect("salt");
    let salted = hash.salted_password(b"pencil", &salt, 4096);
    let credential = ScramCredential::from_salted_password(hash, salt, &salted, 4096);
    let auth_message = "n=user,r=rOprNGfwEbeRWgbNEkqO,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096,c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
    let client_key = hash.mac(&salted, b"Client Key");
    let signature = hash.mac(&credential.stored_key, auth_message.as_bytes());
    let proof: Vec<u8> = client_key
        .iter()
        .zip(&signature)
        .map(|(k, s)| k ^ s)
        .collect();
    assert_eq!(
        BASE64.encode(proof),
        "dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    );
    let server_signature = hash.mac(&credential.server_key, auth_message.as_bytes());
    assert_eq!(
        BASE64.encode(server_signature),
        "6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    );
}

#[test]
fn scram_accepts_the_password_and_refuses_others_alike() {
    for hash in [ScramHash::Sha256, ScramHash::Sha512] {
        let lookup = store(hash, "alice,=x", "s3cret");
        let user =
            exchange(hash, &lookup, &Client::new(hash, "alice,=x", "s3cret")).expect("login");
        assert_eq!(user, "alice,=x");
        let wrong =
            exchange(hash, &lookup, &Client::new(hash, "alice,=x", "guess")).expect_err("wrong");
        let unknown =
            exchange(hash, &lookup, &Client::new(hash, "mallory", "s3cret")).expect_err("unknown");
        assert_eq!(
            wrong, unknown,
            "an unknown user fails as a wrong password does"
        );
        assert!(matches!(wrong, SaslFailure::BadCredentials(_)));
        assert!(!wrong.to_string().contains("s3cret"));
    }
}

#[test]
fn a_final_nonce_with_the_client_nonce_in_front_again_is_accepted_as_kafka_does() {
    let hash = ScramHash::Sha256;
    let lookup = store(hash, "alice", "pw");
    let client = Client::new(hash, "alice", "pw");
    let mut server = ScramServer::new(hash);
    let ScramStep::Challenge(first) = server
        .step(&client.first(), &lookup, SECRET)
        .expect("first")
    else {
        panic!("challenge")
    };
    // What librdkafka 2.0 sends: its nonce, then the server's whole nonce (which starts
    // with it), signed as sent.
    let (last, _) = client.last_echoing(&first, &client.nonce);
    assert!(matches!(
        server.step(&last, &lookup, SECRET),
        Ok(ScramStep::Authenticated { .. })
    ));
}

#[test]
fn an_unknown_user_sees_the_same_salt_every_time() {
    let lookup = |_: &str| None;
    let first = |_: ()| {
        let mut server = ScramServer::new(ScramHash::Sha256);
        match server
            .step(b"n,,n=ghost,r=abc", lookup, SECRET)
            .expect("challenge")
        {
            ScramStep::Challenge(bytes) => String::from_utf8(bytes).expect("utf-8"),
            other => panic!("{other:?}"),
        }
    };
    let salt = |text: String| text.split(",s=").nth(1).expect("salt").to_string();
    assert_eq!(salt(first(())), salt(first(())));
}

#[test]
fn broken_scram_messages_are_refused() {
    let lookup = store(ScramHash::Sha256, "alice", "pw");
    for message in [
        &b"p=tls-unique,,n=alice,r=abc"[..],
        b"n,,r=abc",
        b"n,,n=alice",
        b"n,,n=al=ZZice,r=abc",
        b"n,,n=alice,r=abc,m=ext",
        b"n,a=bob,n=alice,r=abc",
        b"garbage",
        &[0xff, 0xfe],
        &[b'n'; TOKEN_BYTES_MAX + 1],
    ] {
        let mut server = ScramServer::new(ScramHash::Sha256);
        assert!(
            server.step(message, &lookup, SECRET).is_err(),
            "{:?}",
            String::from_utf8_lossy(message)
        );
    }
    let client = Client::new(ScramHash::Sha256, "alice", "pw");
    let mut server = ScramServer::new(ScramHash::Sha256);
    let ScramStep::Challenge(first) = server
        .step(&client.first(), &lookup, SECRET)
        .expect("first")
    else {
        panic!("challenge")
    };
    let (last, _) = client.last(&first);
    let last = String::from_utf8(last).expect("utf-8");
    let nonce = last
        .split(",r=")
        .nth(1)
        .and_then(|r| r.split(',').next())
        .expect("nonce");
    let truncated = last.replace(nonce, &nonce[1..]);
    assert!(
        server.step(truncated.as_bytes(), &lookup, SECRET).is_err(),
        "a changed nonce"
    );
    assert!(
        server.step(b"anything", &lookup, SECRET).is_err(),
        "nothing after the end"
    );
}

#[test]
fn plain_is_checked_against_the_scram_credentials() {
    let credential = ScramCredential::new(ScramHash::Sha512, "pw", ITERATIONS_MIN);
    let lookup = |user: &str| match user {
        "alice" => vec![(ScramHash::Sha512, credential.clone())],
        _ => Vec::new(),
    };
    assert_eq!(check_plain(b"\0alice\0pw", lookup), Ok("alice".to_string()));
    assert_eq!(
        check_plain(b"alice\0alice\0pw", lookup),
        Ok("alice".to_string())
    );
    let refusals = [
        &b"\0alice\0nope"[..],
        b"\0bob\0pw",
        b"bob\0alice\0pw",
        b"\0\0pw",
    ];
    for message in refusals {
        assert!(matches!(
            check_plain(message, lookup),
            Err(SaslFailure::BadCredentials(_))
        ));
    }
    assert!(matches!(
        check_plain(b"alice-pw", lookup),
        Err(SaslFailure::Malformed(_))
    ));
}

#[test]
fn iterations_and_names_follow_kafka() {
    assert!(check_iterations(ScramHash::Sha256, 4095).is_err());
    assert!(check_iterations(ScramHash::Sha256, 16385).is_err());
    assert!(check_iterations(ScramHash::Sha512, -1).is_err());
    assert_eq!(check_iterations(ScramHash::Sha512, 8192), Ok(8192));
    assert_eq!(
        Mechanism::parse("scram-sha-512"),
        Some(Mechanism::ScramSha512)
    );
    assert_eq!(Mechanism::parse("GSSAPI"), None);
    assert_eq!(ScramHash::from_code(2), Some(ScramHash::Sha512));
    assert!(!format!("{:?}", ScramCredential::new(ScramHash::Sha256, "pw", 4096)).contains("key"));
}
