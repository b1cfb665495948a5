//! What the master's integration tests share.

use std::path::Path;

/// Flags that put everything the master writes or needs in `dir`: its certificates (made
/// here), its socket, its token key, and ephemeral ports.
pub fn local_flags(dir: &Path) -> Vec<String> {
    let tls = dir.join("tls");
    if !tls.join("ca.pem").exists() {
        gang_auth::pki::Pki::init(&tls, 1, 1, 1).unwrap();
    }
    let p = |name: &str| tls.join(name).to_str().unwrap().to_string();
    vec![
        "--tls-ca".into(),
        p("ca.pem"),
        "--tls-cert".into(),
        p("master.pem"),
        "--tls-key".into(),
        p("master-key.pem"),
        "--socket".into(),
        dir.join("master.sock").to_str().unwrap().into(),
        "--token-key".into(),
        dir.join("token.key").to_str().unwrap().into(),
        "--listen".into(),
        "127.0.0.1:0".into(),
        "--agent-listen".into(),
        "127.0.0.1:0".into(),
        "--metrics-listen".into(),
        "127.0.0.1:0".into(),
    ]
}
