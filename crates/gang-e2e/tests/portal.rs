//! The reference portal in a real browser: headless Chromium (Debian's, driven through
//! chromedriver's WebDriver API) loads the page the master serves at /portal/ with a
//! user's token, submits a job from the form, sees it complete in the jobs table (live,
//! from Watch), reads its output, sees a running job in the slice matrix and cancels it
//! with its button; a bad token is shown as the master's error. Screenshots are checked
//! (a PNG of the window's size with something drawn) and kept under target/ for people.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use gang_e2e::{bin_dir, options, user_token};
use gang_local::LocalCluster;
use serde_json::{Value, json};

/// Generous: a cold browser on a loaded 2-core host.
const T: Duration = Duration::from_secs(60);

/// A WebDriver session on a chromedriver of our own.
struct Browser {
    driver: Child,
    base: String,
    session: String,
    _profile: tempfile::TempDir,
}

fn http(method: &str, url: &str, body: Option<&Value>) -> Value {
    let mut cmd = Command::new("curl");
    cmd.args([
        "--silent",
        "--show-error",
        "--max-time",
        "60",
        "-X",
        method,
        url,
    ]);
    if let Some(b) = body {
        cmd.args([
            "-H",
            "content-type: application/json",
            "--data-binary",
            &b.to_string(),
        ]);
    }
    let o = cmd.output().expect("curl runs");
    assert!(
        o.status.success(),
        "{method} {url}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "{method} {url}: {e}: {}",
            String::from_utf8_lossy(&o.stdout)
        )
    })
}

impl Browser {
    fn start(master_port: u16) -> Browser {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let driver = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver runs (scripts/setup-test-deps.sh installs chromium-driver)");
        let base = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + T;
        while Command::new("curl")
            .args(["--silent", "--fail", &format!("{base}/status")])
            .output()
            .map(|o| !o.status.success())
            .unwrap_or(true)
        {
            assert!(Instant::now() < deadline, "chromedriver did not start");
            std::thread::sleep(Duration::from_millis(100));
        }
        let profile = tempfile::tempdir().unwrap();
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": "/usr/bin/chromium",
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--window-size=1200,900", "--ignore-certificate-errors",
                    format!("--host-resolver-rules=MAP master.gang:{master_port} 127.0.0.1:{master_port}"),
                    format!("--user-data-dir={}", profile.path().display()),
                ]
            }
        }}});
        let r = http("POST", &format!("{base}/session"), Some(&caps));
        let session = r["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {r}"))
            .to_string();
        Browser {
            driver,
            base,
            session,
            _profile: profile,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}/session/{}{path}", self.base, self.session)
    }

    fn go(&self, url: &str) {
        http("POST", &self.url("/url"), Some(&json!({ "url": url })));
    }

    /// Run `script` (a function body) in the page; its return value.
    fn js(&self, script: &str) -> Value {
        let r = http(
            "POST",
            &self.url("/execute/sync"),
            Some(&json!({"script": script, "args": []})),
        );
        r["value"].clone()
    }

    /// Wait until `script` returns something truthy (a string, true); that value.
    fn wait(&self, what: &str, script: &str) -> Value {
        let deadline = Instant::now() + T;
        loop {
            let v = self.js(script);
            if !(v.is_null() || v == json!(false) || v == json!("")) {
                return v;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: not within {T:?}; the page says {}",
                self.js("return document.body.innerText")
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// A screenshot, checked: a PNG of the window's size, not blank. Kept under target/.
    fn screenshot(&self, name: &str) -> Vec<u8> {
        let r = http("GET", &self.url("/screenshot"), None);
        let png = base64::engine::general_purpose::STANDARD
            .decode(r["value"].as_str().expect("base64"))
            .unwrap();
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "a PNG");
        let width = u32::from_be_bytes(png[16..20].try_into().unwrap());
        let height = u32::from_be_bytes(png[20..24].try_into().unwrap());
        assert!(width >= 1000 && height >= 700, "{width}x{height}");
        // A blank page compresses to almost nothing; text, a table and a grid do not.
        assert!(png.len() > 20_000, "{name}: {} bytes: blank?", png.len());
        let dir = bin_dir().join("portal-screenshots");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("{name}.png")), &png).unwrap();
        png
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = Command::new("curl")
            .args(["--silent", "-X", "DELETE", &self.url("")])
            .output();
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

#[test]
fn the_portal_submits_watches_shows_output_and_cancels_in_a_browser() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("master.toml");
    std::fs::write(&config, "[web]\nportal = true\n").unwrap();
    let c = LocalCluster::start((2, 1), options(&["--config", config.to_str().unwrap()]))
        .expect("local cluster starts");
    let port = c.grpc_socket().expect("the TLS port").port();
    let token = user_token(&c);
    let page = format!("https://master.gang:{port}/portal/");

    let b = Browser::start(port);
    // A token in a link (anyone's: the attacker's own) is wiped and ignored, saying so:
    // it would sign the reader in as whoever made the link.
    b.go(&format!("{page}#token={token}"));
    let said = b.wait(
        "the link's token refused",
        "const t = document.getElementById('token').placeholder; return t.includes('a token in a link is ignored') && t",
    );
    assert!(said.is_string(), "{said}");
    assert_eq!(b.js("return location.hash"), json!(""));
    assert_eq!(
        b.js("return sessionStorage.getItem('gang-token')"),
        json!(null)
    );
    // A bad token pasted: the master's refusal is shown.
    let paste = |t: &str| {
        b.js(&format!(
            "document.getElementById('token').value = '{t}'; document.getElementById('use-token').click();"
        ));
    };
    paste("not-a-token");
    let said = b.wait(
        "the refusal",
        "const t = document.getElementById('status').textContent; return t.includes('not authenticated') && t",
    );
    assert!(said.is_string(), "{said}");
    // The user's own token, pasted.
    paste(&token);
    b.wait(
        "the live jobs table",
        "return document.getElementById('watching').textContent === '(live)'",
    );

    // Submit from the form; the job completes in the table, live.
    b.js("document.getElementById('shape').value = '2';
          document.getElementById('command').value = 'echo hello-from-the-portal';
          document.querySelector('#submit button').click();");
    let said = b.wait(
        "the submission",
        "return /submitted job (\\d+)/.exec(document.getElementById('status').textContent)?.[1]",
    );
    let id: u64 = said.as_str().unwrap().parse().unwrap();
    b.wait(
        "the job completed in the table",
        &format!("return document.querySelector('#job-{id} .state')?.textContent === 'completed'"),
    );
    // Its output, both ranks.
    b.js(&format!("document.getElementById('output-{id}').click()"));
    let out = b.wait(
        "the output",
        "const t = document.getElementById('output').textContent; return (t.match(/hello-from-the-portal/g) || []).length === 2 && t",
    );
    assert_eq!(out, json!("hello-from-the-portal\nhello-from-the-portal\n"));
    b.screenshot("completed-with-output");

    // A running job fills the slice matrix, and its cancel button ends it.
    b.js("document.getElementById('shape').value = '2x1';
          document.getElementById('command').value = 'sleep 600';
          document.querySelector('#submit button').click();");
    let running = id + 1;
    b.wait(
        "the job running",
        &format!(
            "return document.querySelector('#job-{running} .state')?.textContent === 'running'"
        ),
    );
    let cells = b.wait(
        "the job in the matrix",
        &format!("const c = [...document.querySelectorAll('#slice-0 .cell.busy')].map(e => e.textContent); return c.length === 2 && c.every(t => t === '{running}') && c.join(',')"),
    );
    assert_eq!(cells, json!(format!("{running},{running}")));
    b.screenshot("running-in-the-matrix");
    b.js(&format!(
        "document.getElementById('cancel-{running}').click()"
    ));
    b.wait(
        "the cancel asked again",
        &format!("return !!document.getElementById('confirm-cancel-{running}')"),
    );
    b.js(&format!(
        "document.getElementById('confirm-cancel-{running}').click()"
    ));
    b.wait(
        "the job cancelled",
        &format!(
            "return document.querySelector('#job-{running} .state')?.textContent === 'cancelled'"
        ),
    );
    drop(b);
    c.shutdown().expect("clean shutdown");
}

/// The page is served only when asked for, with a policy that keeps it to itself.
#[test]
fn the_portal_is_opt_in_and_locked_down() {
    // The page at /portal/, headers and all, as curl gets it.
    let get = |c: &LocalCluster| {
        let port = c.grpc_socket().expect("the TLS port").port();
        let o = Command::new("curl")
            .args(["--silent", "--include", "--cacert"])
            .arg(c.ca())
            .args(["--resolve", &format!("master.gang:{port}:127.0.0.1")])
            .arg(format!("https://master.gang:{port}/portal/"))
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).to_lowercase()
    };
    let c = LocalCluster::start((1, 1), options(&[])).expect("local cluster starts");
    let off = get(&c);
    assert!(!off.contains("gang portal"), "{off}");
    c.shutdown().expect("clean shutdown");
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("master.toml");
    std::fs::write(&config, "[web]\nportal = true\n").unwrap();
    let c = LocalCluster::start((1, 1), options(&["--config", config.to_str().unwrap()]))
        .expect("local cluster starts");
    let on = get(&c);
    assert!(on.starts_with("http/2 200"), "{on}");
    assert!(
        on.contains("content-security-policy: default-src 'none'"),
        "{on}"
    );
    assert!(on.contains("x-content-type-options: nosniff"), "{on}");
    assert!(on.contains("<title>gang portal</title>"), "{on}");
    c.shutdown().expect("clean shutdown");
}

/// `gangctl start --portal`: one flag, and the URL is printed with the cluster.
#[test]
fn gangctl_start_portal_prints_where_the_portal_is() {
    let o = Command::new(bin_dir().join("gangctl"))
        .args(["start", "--mesh", "1x1", "--portal", "--", "true"])
        .env_remove("GANG_MASTER")
        .stdin(Stdio::null())
        .output()
        .expect("gangctl runs");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    let line = err
        .lines()
        .find(|l| l.starts_with("gangctl: portal at https://localhost:"))
        .unwrap_or_else(|| panic!("no portal line: {err}"));
    assert!(line.contains("/portal/ (sign in with the token"), "{line}");
    assert!(line.contains("ca.pem"), "the CA to trust is named: {line}");
}

/// `gangctl job ID --output json`.
fn job_json(c: &LocalCluster, id: u64) -> Value {
    let o = Command::new(bin_dir().join("gangctl"))
        .args(["--output", "json", "job", &id.to_string()])
        .env("GANG_MASTER", c.master_addr())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// A script: whether the page's jobs table shows job `id` in `state`.
fn state_is(id: u64, state: &str) -> String {
    format!("return document.querySelector('#job-{id} .state')?.textContent === '{state}'")
}

/// With `--portal` alone: jobs that ended before the page opened are listed (their names
/// as text, never as HTML), a command is split as a shell splits it, a name and a time
/// limit go with it, wrong input is said next to its field, and a cancel is asked again.
#[test]
fn the_portal_takes_what_users_type_and_shows_what_ended() {
    let c = LocalCluster::start((2, 1), options(&["--portal"])).expect("local cluster starts");
    let port = c.grpc_socket().expect("the TLS port").port();
    let url = c.portal_url().expect("the portal's URL").to_string();
    assert_eq!(url, format!("https://localhost:{port}/portal/"));
    // The master's certificate names localhost: the URL verifies against the cluster CA.
    let o = Command::new("curl")
        .args(["--silent", "--fail", "--cacert"])
        .arg(c.ca())
        .arg(&url)
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("<title>gang portal</title>"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // Before the page opens: a job that ends, named as an attacker would name it.
    let hostile = "<img src=x onerror=\"window.pwned=1\">";
    let o = gang_e2e::prun(&c, &["-N", "1", "-J", hostile, "--", "true"], None);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let early = job_json(&c, 1)["id"].as_u64().unwrap();

    let b = Browser::start(port);
    b.go(&url);
    b.js(&format!(
        "document.getElementById('token').value = '{}'; document.getElementById('use-token').click();",
        user_token(&c)
    ));
    b.wait("the ended job listed", &state_is(early, "completed"));
    let name = b.js(&format!(
        "return document.querySelector('#job-{early} td:nth-child(2)').textContent"
    ));
    assert_eq!(name, json!(hostile));
    assert_eq!(
        b.js("return document.querySelectorAll('#jobs img').length"),
        json!(0)
    );
    assert_eq!(b.js("return window.pwned === undefined"), json!(true));

    // Wrong input is said at its field, and nothing is submitted.
    let submit = |command: &str, name: &str, time: &str| {
        b.js(&format!(
            "document.getElementById('shape').value = '1';
             document.getElementById('command').value = {};
             document.getElementById('name').value = {};
             document.getElementById('time').value = {};
             document.getElementById('status').textContent = '';
             document.querySelector('#submit button').click();",
            json!(command),
            json!(name),
            json!(time)
        ));
    };
    submit("echo 'oops", "", "");
    b.wait("the quote refused", "return document.getElementById('command-error').textContent.includes(\"without its closing\")");
    submit("true", "", "soon");
    b.wait(
        "the time refused",
        "return document.getElementById('time-error').textContent.includes('a time limit is')",
    );
    assert_eq!(
        b.js("return document.getElementById('status').textContent"),
        json!("")
    );

    // A quoted shell command, a name and a time limit, as the user typed them.
    submit("sh -c 'echo one  \"two\"'", "typed", "1:30");
    let id: u64 = b
        .wait("the submission", "return /submitted job (\\d+)/.exec(document.getElementById('status').textContent)?.[1]")
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let spec = job_json(&c, id);
    assert_eq!(
        spec["argv"],
        json!(["sh", "-c", "echo one  \"two\""]),
        "{spec}"
    );
    assert_eq!(
        (&spec["name"], &spec["time_limit_s"]),
        (&json!("typed"), &json!(90)),
        "{spec}"
    );
    b.wait("the typed job completed", &state_is(id, "completed"));
    b.screenshot("fields-and-history");

    // Cancel asks first: "no" leaves the job running, "yes" cancels it.
    submit("sleep 600", "long", "");
    let long = id + 1;
    b.wait("the long job running", &state_is(long, "running"));
    b.js(&format!("document.getElementById('cancel-{long}').click()"));
    b.wait(
        "the question",
        &format!("return !!document.getElementById('confirm-cancel-{long}')"),
    );
    b.screenshot("cancel-asked");
    b.js(&format!("document.getElementById('keep-{long}').click()"));
    assert_eq!(
        b.js(&format!(
            "return !!document.getElementById('confirm-box-{long}')"
        )),
        json!(false)
    );
    assert_eq!(job_json(&c, long)["state"], "running");
    b.js(&format!("document.getElementById('cancel-{long}').click()"));
    b.wait(
        "the question again",
        &format!("return !!document.getElementById('confirm-cancel-{long}')"),
    );
    b.js(&format!(
        "document.getElementById('confirm-cancel-{long}').click()"
    ));
    b.wait("the job cancelled", &state_is(long, "cancelled"));
    drop(b);
    c.shutdown().expect("clean shutdown");
}
