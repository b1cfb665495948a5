//! `gangctl job` of an allocation (its steps, as `scontrol show job` and `sacct` show
//! them) or of a step (its allocation).

use gang_proto::v1::JobInfo;
use serde::Serialize;

use super::View;
use super::format::{fmt_job_run, job_label, shell_join, table};
use super::job_view::JobView;
use super::json::JobJson;

/// A job, with its steps if it is an allocation (as many as were fetched).
pub struct JobWithSteps<'a> {
    pub job: &'a JobInfo,
    pub steps: &'a [JobInfo],
}

#[derive(Debug, Serialize)]
pub struct JobWithStepsJson {
    #[serde(flatten)]
    pub job: JobJson,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<JobJson>,
}

impl View for JobWithSteps<'_> {
    type Json = JobWithStepsJson;

    fn json(&self) -> JobWithStepsJson {
        JobWithStepsJson {
            job: JobJson::from(self.job),
            steps: self.steps.iter().map(JobJson::from).collect(),
        }
    }

    fn cli(&self) -> String {
        let j = self.job;
        let mut out = JobView(j).cli();
        if j.allocation_id != 0 {
            out.push_str(&format!(
                "step:       {} of allocation {} (`gangctl job {}`)\n",
                j.step.unwrap_or_default(),
                j.allocation_id,
                j.allocation_id
            ));
        }
        if j.spec.as_ref().is_some_and(|s| s.allocate) {
            if j.step_ids.is_empty() {
                out.push_str("steps:      none yet\n");
            } else {
                let rows = self
                    .steps
                    .iter()
                    .map(|s| {
                        vec![
                            job_label(s),
                            s.id.to_string(),
                            s.state().label().to_string(),
                            s.submesh
                                .map(|m| format!("{}x{}@({},{})", m.w, m.h, m.x, m.y))
                                .unwrap_or_else(|| format!("({})", s.pending_reason)),
                            s.exit_code.map_or("-".into(), |c| c.to_string()),
                            fmt_job_run(s),
                            shell_join(&s.spec.clone().unwrap_or_default().argv),
                        ]
                    })
                    .collect();
                out.push_str(&format!("steps:      {}\n", j.step_ids.len()));
                let t = table(
                    &[
                        "STEP", "JOBID", "STATE", "SUBMESH", "EXIT", "RUN", "COMMAND",
                    ],
                    rows,
                );
                for line in t.lines() {
                    out.push_str(&format!("  {line}\n"));
                }
                let older = j.step_ids.len() - self.steps.len();
                if older > 0 {
                    out.push_str(&format!(
                        "  (and {older} older: gangctl acct {} lists them all)\n",
                        j.id
                    ));
                }
            }
        }
        out
    }
}
