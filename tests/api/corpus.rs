//! Issue 14's yardstick: `tests/corpus/model_outputs.yaml` holds raw outputs in the shapes real
//! models write (each case names the public document that shows its shape) with the reading a
//! careful person gives them. Every case goes through the real server, its mock upstream
//! answering with the output once and with a sentinel answer to a repair round. The score is
//! the share read as expected; a wrong action (a call the model did not mean) fails at once.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::support::corpus::{for_each_case, load, run_plain, Got, FAMILIES};

const MIN_SCORE_PERCENT: f64 = 97.0;

fn one_line(text: &str) -> String {
    let line: String = text.replace('\n', "\\n");
    if line.chars().count() > 220 {
        format!("{}…", line.chars().take(220).collect::<String>())
    } else {
        line
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corpus_reads_as_a_person_would() {
    let corpus = Arc::new(load());
    let results = for_each_case(&corpus, |corpus, i| async move {
        let case = &corpus.cases[i];
        run_plain(case, &case.body(&corpus)).await.0
    })
    .await;

    let kinds_expected = ["action", "answer", "repair"];
    let kinds_got = ["action", "answer", "repair", "error"];
    let mut table: BTreeMap<(&str, &str), usize> = BTreeMap::new();
    let mut per_family: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    let mut correct = 0usize;
    let mut wrong_actions = Vec::new();
    let mut mismatches = Vec::new();
    for (case, result) in corpus.cases.iter().zip(&results) {
        let got = result.clone().unwrap_or_else(|panic| Got::Error {
            status: 0,
            kind: format!("the test panicked: {panic}"),
        });
        let expected = case.expected();
        *table.entry((expected.kind(), got.kind())).or_default() += 1;
        let family = per_family.entry(case.family.as_str()).or_default();
        family.1 += 1;
        if case.judge(&got) {
            correct += 1;
            family.0 += 1;
        } else {
            let thought = case
                .thought
                .as_deref()
                .map(|t| format!(" thought {t:?}"))
                .unwrap_or_default();
            mismatches.push(format!(
                "  [{}] {}: expected {expected}{thought} | got {}",
                case.family,
                case.id,
                one_line(&got.to_string())
            ));
        }
        if case.wrong_action(&got) {
            wrong_actions.push(format!(
                "  [{}] {}: expected {expected} | got {got}",
                case.family, case.id
            ));
        }
    }

    let total = corpus.cases.len();
    let score = 100.0 * correct as f64 / total as f64;
    let mut report = format!("\ncorpus: {correct}/{total} read as expected ({score:.1} %)\n\n");
    report.push_str(&format!("{:<18}", "expected \\ got"));
    for g in kinds_got {
        report.push_str(&format!("{g:>8}"));
    }
    report.push('\n');
    for e in kinds_expected {
        report.push_str(&format!("{e:<18}"));
        for g in kinds_got {
            report.push_str(&format!("{:>8}", table.get(&(e, g)).copied().unwrap_or(0)));
        }
        report.push('\n');
    }
    report.push_str("\nper family (correct/total):\n");
    for (family, (ok, all)) in &per_family {
        report.push_str(&format!("  {family:<22} {ok}/{all}\n"));
    }
    report.push_str(&format!("\nmismatches ({}):\n", mismatches.len()));
    for m in &mismatches {
        report.push_str(m);
        report.push('\n');
    }
    report.push_str(&format!("\nwrong actions ({}):\n", wrong_actions.len()));
    for w in &wrong_actions {
        report.push_str(w);
        report.push('\n');
    }
    eprintln!("{report}");
    assert!(
        wrong_actions.is_empty(),
        "{} wrong actions: an action the model did not mean was proposed",
        wrong_actions.len()
    );
    assert!(
        score >= MIN_SCORE_PERCENT,
        "score {score:.1} % is below {MIN_SCORE_PERCENT} %"
    );
}

#[test]
fn corpus_covers_every_family() {
    let corpus = load();
    assert!(corpus.cases.len() >= 160, "{} cases", corpus.cases.len());
    for family in FAMILIES {
        let n = corpus.cases.iter().filter(|c| c.family == family).count();
        let least = if family == "dialect" { 25 } else { 8 };
        assert!(
            n >= least,
            "family {family} has {n} cases, fewer than {least}"
        );
    }
    let cut = corpus
        .cases
        .iter()
        .filter(|c| c.finish() == "length")
        .count();
    assert!(cut >= 8, "{cut} cut-off cases");
}
