//! HTTPS on the HTTP listener: the protocol answers over TLS with links that say `https://`,
//! a plain-HTTP client gets no answer (and the node keeps serving), and a renewed
//! certificate is picked up without a restart.

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::cluster::eventually;
use common::tls::TestCa;
use common::{start_with, Fetch};
use rowcall_node::config::HttpsConfig;
use serde_json::Value;

/// Writes a certificate for 127.0.0.1 signed by `ca`, and its key, to the node's files.
fn write_certificate(ca: &TestCa, files: &HttpsConfig) {
    let (cert, key) = ca.issue("rowcall https");
    std::fs::write(&files.cert_file, cert).unwrap();
    std::fs::write(&files.key_file, key).unwrap();
}

/// A client that trusts `ca` alone.
fn client_trusting(ca: &TestCa) -> reqwest::Client {
    let root = reqwest::Certificate::from_pem(ca.ca_pem().as_bytes()).unwrap();
    reqwest::Client::builder()
        .tls_certs_only([root])
        .build()
        .unwrap()
}

fn files_in(dir: &Path) -> HttpsConfig {
    HttpsConfig {
        cert_file: dir.join("https-cert.pem"),
        key_file: dir.join("https-key.pem"),
        reload_secs: 1,
    }
}

#[tokio::test]
async fn the_protocol_answers_over_https_and_picks_up_a_renewed_certificate() {
    let certs = tempfile::tempdir().unwrap();
    let first_ca = TestCa::new(certs.path(), "first");
    let files = files_in(certs.path());
    write_certificate(&first_ca, &files);
    let configured = files.clone();
    let node = start_with(true, move |config| config.node.https = Some(configured)).await;
    assert!(node.url.starts_with("https://"), "{}", node.url);
    let https = client_trusting(&first_ca);

    // ask and contract over TLS; every link the node gives points back at HTTPS.
    let ask: Value = https
        .get(format!("{}/api/dispatch?ask=current+time+in+utc", node.url))
        .fetch()
        .await;
    let contract = ask["best"]["contract"].as_str().unwrap();
    assert!(contract.starts_with("https://"), "{ask}");
    let row: Value = https.get(contract).fetch().await;
    assert_eq!(row["key"], ask["best"]["key"]);

    // Plain HTTP on the same port gets no HTTP answer, and the node keeps serving.
    let plain = node.url.replacen("https://", "http://", 1);
    let refused = reqwest::Client::new()
        .get(format!("{plain}/healthz"))
        .send()
        .await;
    assert!(refused.is_err(), "plain HTTP was answered: {refused:?}");
    let health = https
        .get(format!("{}/healthz", node.url))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);

    // A certificate from another CA written over the files is used by new connections
    // within the reload period; clients trusting only the old CA are then refused.
    let second_ca = TestCa::new(certs.path(), "second");
    write_certificate(&second_ca, &files);
    let renewed = client_trusting(&second_ca);
    let healthz = format!("{}/healthz", node.url);
    eventually(
        Duration::from_secs(20),
        "the renewed certificate is served",
        || {
            let request = renewed.get(&healthz).send();
            async move { request.await.is_ok_and(|r| r.status() == 200) }
        },
    )
    .await;
    // A fresh client (no pooled connection) that trusts only the first CA.
    let stale = client_trusting(&first_ca).get(&healthz).send().await;
    assert!(stale.is_err(), "the old certificate is still served");
    node.handle.shutdown().await;
}
