//! The Standard Workload Format (Parallel Workloads Archive, SWF 2.2).
//!
//! Header lines start with `;` as `Key: value`; each other non-blank line is one job of
//! 18 whitespace-separated fields, `-1` where unknown. Gzip input (`.swf.gz`) is detected
//! by its magic bytes, so the file name does not matter.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use flate2::read::MultiGzDecoder;

/// One job line, with the fields the simulator uses.
#[derive(Debug, Clone, PartialEq)]
pub struct SwfJob {
    /// 1-based line number in the file, for messages.
    pub line: usize,
    pub id: u64,
    pub submit: f64,
    /// Wait time the site's own scheduler achieved (`None` if unknown).
    pub wait: Option<f64>,
    pub runtime: Option<f64>,
    /// Allocated processors, else requested ones.
    pub procs: Option<u64>,
    pub requested_time: Option<f64>,
    pub status: i64,
}

#[derive(Debug, Default, Clone)]
pub struct Swf {
    pub header: BTreeMap<String, String>,
    pub jobs: Vec<SwfJob>,
    /// Malformed lines skipped under `skip_bad`: (line, reason).
    pub bad_lines: Vec<(usize, String)>,
}

impl Swf {
    pub fn header_u64(&self, key: &str) -> Option<u64> {
        self.header.get(key)?.trim().parse().ok()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SwfError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("line {line}: {reason}: {text:?}")]
    Malformed {
        line: usize,
        reason: String,
        text: String,
    },
}

pub const FIELDS: usize = 18;

fn parse_line(line: usize, text: &str) -> Result<SwfJob, String> {
    let f: Vec<&str> = text.split_whitespace().collect();
    if f.len() != FIELDS {
        return Err(format!("expected {FIELDS} fields, found {}", f.len()));
    }
    let num = |i: usize, name: &str| -> Result<f64, String> {
        let v: f64 = f[i]
            .parse()
            .map_err(|_| format!("field {} ({name}) is not a number", i + 1))?;
        if v.is_finite() {
            Ok(v)
        } else {
            Err(format!("field {} ({name}) is not finite", i + 1))
        }
    };
    let known = |v: f64| (v >= 0.0).then_some(v);
    let id = num(0, "job number")?;
    if id < 0.0 || id.fract() != 0.0 {
        return Err(format!(
            "field 1 (job number) must be a non-negative integer, got {}",
            f[0]
        ));
    }
    let submit = num(1, "submit time")?;
    if submit < 0.0 {
        return Err(format!("field 2 (submit time) is negative: {}", f[1]));
    }
    let procs = known(num(4, "allocated processors")?)
        .filter(|&p| p > 0.0)
        .or(known(num(7, "requested processors")?).filter(|&p| p > 0.0))
        .map(|p| p.ceil() as u64);
    Ok(SwfJob {
        line,
        id: id as u64,
        submit,
        wait: known(num(2, "wait time")?),
        runtime: known(num(3, "run time")?),
        procs,
        requested_time: known(num(8, "requested time")?).filter(|&t| t > 0.0),
        status: num(10, "status")? as i64,
    })
}

/// Parse SWF text. A malformed job line is an error naming the line, unless `skip_bad`,
/// which records it in [`Swf::bad_lines`] and goes on.
pub fn parse(reader: impl BufRead, skip_bad: bool) -> Result<Swf, SwfError> {
    let mut swf = Swf::default();
    for (i, line) in reader.lines().enumerate() {
        let n = i + 1;
        let text = line.map_err(|e| SwfError::Malformed {
            line: n,
            reason: format!("unreadable: {e}"),
            text: String::new(),
        })?;
        let t = text.trim();
        if t.is_empty() {
            continue;
        }
        if let Some(h) = t.strip_prefix(';') {
            if let Some((k, v)) = h.split_once(':') {
                swf.header
                    .entry(k.trim().to_string())
                    .or_insert_with(|| v.trim().to_string());
            }
            continue;
        }
        match parse_line(n, t) {
            Ok(job) => swf.jobs.push(job),
            Err(reason) if skip_bad => swf.bad_lines.push((n, reason)),
            Err(reason) => {
                return Err(SwfError::Malformed {
                    line: n,
                    reason,
                    text: t.chars().take(120).collect(),
                });
            }
        }
    }
    Ok(swf)
}

/// Open an SWF file, plain or gzip-compressed.
pub fn read(path: &Path, skip_bad: bool) -> Result<Swf, SwfError> {
    let io = |source| SwfError::Io {
        path: path.display().to_string(),
        source,
    };
    let mut file = BufReader::new(File::open(path).map_err(io)?);
    let gz = file.fill_buf().map_err(io)?.starts_with(&[0x1f, 0x8b]);
    let reader: Box<dyn Read> = if gz {
        Box::new(MultiGzDecoder::new(file))
    } else {
        Box::new(file)
    };
    parse(BufReader::with_capacity(1 << 16, reader), skip_bad).map_err(|e| match e {
        SwfError::Malformed { line, reason, text } if reason.starts_with("unreadable") => {
            SwfError::Malformed {
                line,
                reason: format!("{reason} (is {} a valid SWF or gzip file?)", path.display()),
                text,
            }
        }
        e => e,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "; Version: 2.2\n; MaxProcs: 100\n;\n\
        1 0 10 100 4 -1 -1 4 200 -1 1 1 1 -1 -1 -1 -1 -1\n\
        \n\
        2 5 -1 -1 -1 -1 -1 8 -1 -1 5 1 1 -1 -1 -1 -1 -1\n";

    #[test]
    fn parses_header_and_jobs() {
        let swf = parse(SAMPLE.as_bytes(), false).unwrap();
        assert_eq!(swf.header_u64("MaxProcs"), Some(100));
        assert_eq!(swf.jobs.len(), 2);
        let j = &swf.jobs[0];
        assert_eq!(
            (j.line, j.id, j.submit, j.wait, j.runtime, j.procs),
            (4, 1, 0.0, Some(10.0), Some(100.0), Some(4))
        );
        assert_eq!(j.requested_time, Some(200.0));
        // Allocated unknown: fall back to requested processors; unknowns are None.
        let j = &swf.jobs[1];
        assert_eq!(
            (j.procs, j.wait, j.runtime, j.requested_time, j.status),
            (Some(8), None, None, None, 5)
        );
    }

    #[test]
    fn malformed_lines_name_the_line_or_are_skipped() {
        let text = format!("{SAMPLE}3 7 1 1 1\n4 x 1 1 1 -1 -1 1 1 -1 1 1 1 -1 -1 -1 -1 -1\n");
        let e = parse(text.as_bytes(), false).unwrap_err().to_string();
        assert!(e.starts_with("line 7: expected 18 fields, found 5"), "{e}");
        let swf = parse(text.as_bytes(), true).unwrap();
        assert_eq!(swf.jobs.len(), 2);
        assert_eq!(swf.bad_lines.len(), 2);
        assert_eq!(
            swf.bad_lines[1],
            (8, "field 2 (submit time) is not a number".to_string())
        );
    }
}
