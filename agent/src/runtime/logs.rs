//! Workload logs through the executor: a selector names one instance or job
//! (`tenant/app/workload/replica/vN`, `tenant/app/workload/init/job/vN`) or
//! every replica of a workload (`tenant/app/workload`, optionally with
//! `/replica`); lines of several instances are tagged with their instance.

use daros_adapters::logs::LogLine;
use daros_adapters::{AdapterError, LogQuery, RuntimeAdapter, RuntimeId};
use daros_coordinator::reconcile::{InitJobId, InstanceId};
use futures::StreamExt;
use futures::stream::BoxStream;
use serde::Serialize;

use super::executor::Executor;
use super::target::Subject;

/// One log line of one instance.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InstanceLogLine {
    /// The instance or job.
    pub instance: String,
    /// The line.
    #[serde(flatten)]
    pub line: LogLine,
}

/// Why logs cannot be shown.
#[derive(Debug, thiserror::Error)]
pub enum LogsError {
    /// The selector is malformed (400).
    #[error("workload {selector:?}: {reason}")]
    Invalid {
        /// The selector.
        selector: String,
        /// Why.
        reason: String,
    },
    /// Nothing matches (404).
    #[error("no instance of {0:?} runs on this node")]
    NotFound(String),
    /// The runtime failed (500).
    #[error(transparent)]
    Adapter(#[from] AdapterError),
}

/// A parsed selector.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Selector {
    One(Subject),
    Replicas {
        tenant: String,
        app: String,
        workload: String,
        replica: Option<u32>,
    },
}

fn parse(s: &str) -> Result<Selector, LogsError> {
    if let Ok(i) = s.parse::<InstanceId>() {
        return Ok(Selector::One(Subject::Instance(i)));
    }
    if let Ok(j) = s.parse::<InitJobId>() {
        return Ok(Selector::One(Subject::Job(j)));
    }
    let invalid = |reason: &str| LogsError::Invalid {
        selector: s.to_string(),
        reason: reason.to_string(),
    };
    let parts: Vec<&str> = s.split('/').collect();
    if parts.iter().any(|p| p.is_empty()) {
        return Err(invalid(
            "expected tenant/app/workload[/replica], tenant/app/workload/replica/vN or tenant/app/workload/init/job/vN",
        ));
    }
    match parts.as_slice() {
        [t, a, w] => Ok(Selector::Replicas {
            tenant: (*t).into(),
            app: (*a).into(),
            workload: (*w).into(),
            replica: None,
        }),
        [t, a, w, r] => Ok(Selector::Replicas {
            tenant: (*t).into(),
            app: (*a).into(),
            workload: (*w).into(),
            replica: Some(
                r.parse()
                    .map_err(|_| invalid("the replica must be a number"))?,
            ),
        }),
        _ => Err(invalid(
            "expected tenant/app/workload[/replica], tenant/app/workload/replica/vN or tenant/app/workload/init/job/vN",
        )),
    }
}

fn matches(sel: &Selector, subject: &Subject) -> bool {
    match (sel, subject) {
        (Selector::One(a), b) => a == b,
        (
            Selector::Replicas {
                tenant,
                app,
                workload,
                replica,
            },
            Subject::Instance(i),
        ) => {
            &i.app.tenant == tenant
                && &i.app.name == app
                && &i.workload == workload
                && replica.is_none_or(|r| r == i.replica)
        }
        (Selector::Replicas { .. }, Subject::Job(_)) => false,
    }
}

impl Executor {
    async fn resolve(&self, selector: &str) -> Result<Vec<(String, RuntimeId)>, LogsError> {
        let sel = parse(selector)?;
        let found: Vec<(String, RuntimeId)> = self
            .core()
            .runtime_ids()
            .await
            .into_iter()
            .filter(|(s, _)| matches(&sel, s))
            .filter_map(|(s, r)| r.map(|r| (s.to_string(), r)))
            .collect();
        if found.is_empty() {
            return Err(LogsError::NotFound(selector.to_string()));
        }
        Ok(found)
    }

    /// The last `tail` lines (all without) of every instance `selector` names,
    /// in time order.
    pub async fn logs(
        &self,
        selector: &str,
        tail: Option<usize>,
    ) -> Result<Vec<InstanceLogLine>, LogsError> {
        let mut out = Vec::new();
        for (name, rid) in self.resolve(selector).await? {
            let lines = self.adapters().logs(&rid, LogQuery { tail }).await?;
            out.extend(lines.into_iter().map(|line| InstanceLogLine {
                instance: name.clone(),
                line,
            }));
        }
        out.sort_by_key(|l| l.line.time);
        if let Some(n) = tail {
            let skip = out.len().saturating_sub(n);
            out.drain(..skip);
        }
        Ok(out)
    }

    /// The last `tail` lines, then every new line, of every instance
    /// `selector` names (ends when they are removed).
    pub async fn follow_logs(
        &self,
        selector: &str,
        tail: usize,
    ) -> Result<BoxStream<'static, Result<InstanceLogLine, LogsError>>, LogsError> {
        let mut streams = Vec::new();
        for (name, rid) in self.resolve(selector).await? {
            let s = self.adapters().follow_logs(&rid, tail).await?;
            streams.push(
                s.map(move |r| {
                    r.map(|line| InstanceLogLine {
                        instance: name.clone(),
                        line,
                    })
                    .map_err(LogsError::from)
                })
                .boxed(),
            );
        }
        Ok(futures::stream::select_all(streams).boxed())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_name_instances_jobs_and_workloads() {
        let i: Subject = Subject::Instance("acme/shop/web/1/v2".parse().unwrap());
        let j: Subject = Subject::Job("acme/shop/web/init/migrate/v1".parse().unwrap());
        assert!(matches(&parse("acme/shop/web/1/v2").unwrap(), &i));
        assert!(!matches(&parse("acme/shop/web/1/v3").unwrap(), &i));
        assert!(matches(&parse("acme/shop/web").unwrap(), &i));
        assert!(!matches(&parse("acme/shop/web").unwrap(), &j));
        assert!(matches(&parse("acme/shop/web/1").unwrap(), &i));
        assert!(!matches(&parse("acme/shop/web/0").unwrap(), &i));
        assert!(matches(
            &parse("acme/shop/web/init/migrate/v1").unwrap(),
            &j
        ));
        for bad in [
            "acme",
            "acme/shop",
            "acme//web",
            "acme/shop/web/x",
            "a/b/c/d/e/f/g",
        ] {
            assert!(
                matches!(parse(bad), Err(LogsError::Invalid { .. })),
                "{bad}"
            );
        }
    }
}
