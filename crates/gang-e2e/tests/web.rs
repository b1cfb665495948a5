//! Browsers: the master's TLS port answers gRPC-Web (over HTTP/2, which browsers negotiate
//! with TLS) with a user's token, and CORS lets the pages of the origins in its config call
//! it and no others. Spoken with curl, as a page's `fetch` would.

use std::io::Write;
use std::process::Command;

use gang_e2e::{options, user_token};
use gang_local::LocalCluster;
use gang_proto::v1::{JobSpec, ListJobsRequest, ListJobsResponse, SubmitRequest, SubmitResponse};
use prost::Message;

const PORTAL: &str = "https://portal.example";

/// A length-prefixed gRPC-Web message frame.
fn frame(msg: &impl Message) -> Vec<u8> {
    let body = msg.encode_to_vec();
    let mut out = vec![0u8];
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(&body);
    out
}

/// The frames of a gRPC-Web response body: (flags, payload).
fn frames(mut body: &[u8]) -> Vec<(u8, Vec<u8>)> {
    let mut out = Vec::new();
    while body.len() >= 5 {
        let len = u32::from_be_bytes(body[1..5].try_into().unwrap()) as usize;
        out.push((body[0], body[5..5 + len].to_vec()));
        body = &body[5 + len..];
    }
    out
}

struct Web {
    port: u16,
    ca: std::path::PathBuf,
    dir: tempfile::TempDir,
}

impl Web {
    /// curl ARGS against `https://master.gang:PORT`, the CA the cluster's; its response
    /// headers (lowercase) and body.
    fn curl(&self, args: &[&str]) -> (String, Vec<u8>) {
        self.curl_ok(args, false)
    }

    /// [`Web::curl`]; with `refused_early`, a stream the server reset after its answer
    /// (it answered before reading the request's body: curl's exit 92) is no failure.
    fn curl_ok(&self, args: &[&str], refused_early: bool) -> (String, Vec<u8>) {
        let headers = self.dir.path().join("headers");
        let body = self.dir.path().join("body");
        let o = Command::new("curl")
            .args(["--silent", "--show-error", "--http2", "--max-time", "30"])
            .arg("--cacert")
            .arg(&self.ca)
            .args(["--resolve", &format!("master.gang:{}:127.0.0.1", self.port)])
            .arg("--dump-header")
            .arg(&headers)
            .arg("--output")
            .arg(&body)
            .args(args)
            .output()
            .expect("curl runs (scripts/setup-test-deps.sh installs it)");
        assert!(
            o.status.success() || (refused_early && o.status.code() == Some(92)),
            "curl {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        (
            std::fs::read_to_string(headers).unwrap().to_lowercase(),
            std::fs::read(body).unwrap_or_default(),
        )
    }

    /// A gRPC-Web call: the response's message frames and its trailer frame's text.
    fn call(
        &self,
        method: &str,
        req: &[u8],
        token: Option<&str>,
    ) -> (String, Vec<Vec<u8>>, String) {
        let file = self.dir.path().join("request");
        std::fs::File::create(&file)
            .unwrap()
            .write_all(req)
            .unwrap();
        let url = format!(
            "https://master.gang:{}/gang.v1.JobService/{method}",
            self.port
        );
        let auth = token.map(|t| format!("authorization: Bearer {t}"));
        let mut args = vec![
            "-X",
            "POST",
            "-H",
            "content-type: application/grpc-web+proto",
            "-H",
            "x-grpc-web: 1",
            "-H",
            "origin: https://portal.example",
        ];
        if let Some(a) = &auth {
            args.extend(["-H", a.as_str()]);
        }
        let data = format!("@{}", file.display());
        args.extend(["--data-binary", &data, &url]);
        let (headers, body) = self.curl(&args);
        let mut messages = Vec::new();
        let mut trailers = String::new();
        for (flags, payload) in frames(&body) {
            if flags & 0x80 != 0 {
                trailers.push_str(&String::from_utf8_lossy(&payload).to_lowercase());
            } else {
                messages.push(payload);
            }
        }
        (headers, messages, trailers)
    }
}

#[test]
fn a_browser_calls_the_api_with_grpc_web_and_cors() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("master.toml");
    std::fs::write(&config, format!("[web]\nallow_origins = [\"{PORTAL}\"]\n")).unwrap();
    let c = LocalCluster::start((1, 1), options(&["--config", config.to_str().unwrap()]))
        .expect("local cluster starts");
    let port = c.grpc_socket().expect("the TLS port").port();
    let web = Web {
        port,
        ca: c.ca(),
        dir,
    };
    // A user's token, from the socket.
    let token = user_token(&c);

    // Submit and list, as a page would.
    let submit = SubmitRequest {
        spec: Some(JobSpec {
            shape: "1".into(),
            argv: vec!["true".into()],
            cwd: "/tmp".into(),
            ..Default::default()
        }),
        ..Default::default()
    };
    let (headers, msgs, trailers) = web.call("Submit", &frame(&submit), Some(&token));
    assert!(headers.starts_with("http/2 200"), "{headers}");
    assert!(
        headers.contains("content-type: application/grpc-web+proto"),
        "{headers}"
    );
    assert!(
        headers.contains(&format!("access-control-allow-origin: {PORTAL}")),
        "{headers}"
    );
    assert!(trailers.contains("grpc-status:0"), "{trailers}");
    let job = SubmitResponse::decode(msgs[0].as_slice())
        .unwrap()
        .job
        .unwrap();
    assert!(job.id > 0);
    let (_, msgs, trailers) = web.call(
        "ListJobs",
        &frame(&ListJobsRequest::default()),
        Some(&token),
    );
    assert!(trailers.contains("grpc-status:0"), "{trailers}");
    let listed = ListJobsResponse::decode(msgs[0].as_slice()).unwrap();
    assert!(listed.jobs.iter().any(|j| j.id == job.id));

    // Without a token the TLS port knows nobody.
    let (headers, _, trailers) = web.call("ListJobs", &frame(&ListJobsRequest::default()), None);
    let status = format!("{headers}{trailers}");
    assert!(
        status.contains("grpc-status: 16") || status.contains("grpc-status:16"),
        "{status}"
    );

    // CORS preflight: the portal's origin may call; another origin gets no permission.
    let url = format!("https://master.gang:{port}/gang.v1.JobService/ListJobs");
    let preflight = |origin: &str| {
        web.curl(&[
            "-X",
            "OPTIONS",
            "-H",
            &format!("origin: {origin}"),
            "-H",
            "access-control-request-method: POST",
            "-H",
            "access-control-request-headers: content-type,x-grpc-web,authorization",
            &url,
        ])
        .0
    };
    let ok = preflight(PORTAL);
    assert!(
        ok.contains(&format!("access-control-allow-origin: {PORTAL}")),
        "{ok}"
    );
    assert!(ok.contains("authorization"), "{ok}");
    let evil = preflight("https://evil.example");
    assert!(!evil.contains("access-control-allow-origin"), "{evil}");

    // What a page on another site can send without a preflight: a `text/plain` POST
    // whose body is a gRPC frame, with whatever credentials the browser holds (here a
    // token, as a client certificate would be). Refused before any service runs it; and
    // gRPC-Web from an origin not allowed, the same.
    let before = web
        .call(
            "ListJobs",
            &frame(&ListJobsRequest::default()),
            Some(&token),
        )
        .1;
    let listed_before = ListJobsResponse::decode(before[0].as_slice())
        .unwrap()
        .jobs
        .len();
    let file = web.dir.path().join("cross-site");
    std::fs::write(&file, frame(&submit)).unwrap();
    let data = format!("@{}", file.display());
    let submit_url = format!("https://master.gang:{port}/gang.v1.JobService/Submit");
    let bearer = format!("authorization: Bearer {token}");
    for (ct, origin, status) in [
        ("text/plain", "https://evil.example", "http/2 415"),
        (
            "application/grpc-web+proto",
            "https://evil.example",
            "http/2 403",
        ),
    ] {
        let (headers, _) = web.curl_ok(
            &[
                "-X",
                "POST",
                "-H",
                &format!("content-type: {ct}"),
                "-H",
                &format!("origin: {origin}"),
                "-H",
                &bearer,
                "--data-binary",
                &data,
                &submit_url,
            ],
            true,
        );
        assert!(headers.starts_with(status), "{ct} from {origin}: {headers}");
    }
    let after = web
        .call(
            "ListJobs",
            &frame(&ListJobsRequest::default()),
            Some(&token),
        )
        .1;
    let listed_after = ListJobsResponse::decode(after[0].as_slice())
        .unwrap()
        .jobs
        .len();
    assert_eq!(
        listed_after, listed_before,
        "a cross-site request made a job"
    );
    c.shutdown().expect("clean shutdown");
}
