//! One of an issue's goals, judged on the figures of one run of a benchmark.
//!
//! Invariant: a goal whose figures were not measured in this invocation is reported as
//! "not measured", never as met.

use serde_json::{json, Value};

#[derive(Debug)]
pub struct Goal {
    pub text: String,
    /// `None`: not measured in this invocation.
    pub met: Option<bool>,
    pub evidence: String,
}

impl Goal {
    pub fn verdict(&self) -> String {
        match self.met {
            Some(true) => format!("met ({})", self.evidence),
            Some(false) => format!("NOT met ({})", self.evidence),
            None => format!("not measured ({})", self.evidence),
        }
    }

    pub fn json(&self) -> Value {
        json!({ "goal": self.text, "met": self.met, "evidence": self.evidence })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_say_whether_measured() {
        let goal = |met| Goal {
            text: "t".to_string(),
            met,
            evidence: "e".to_string(),
        };
        assert_eq!(goal(Some(true)).verdict(), "met (e)");
        assert_eq!(goal(Some(false)).verdict(), "NOT met (e)");
        assert_eq!(goal(None).verdict(), "not measured (e)");
        assert_eq!(goal(None).json()["met"], Value::Null);
    }
}
