//! Approval on the page: a call the policy asks about is shown on the page of the run under
//! way (an `approval_request` event with its id), and waits until the person's click is posted
//! back (`POST api/approval`). With no page watching, or when the page goes away, the call is
//! denied, and the model reads why.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use futures_util::future::BoxFuture;
use serde_json::{json, Value};
use tokio::sync::oneshot;

use super::watcher::Events;
use crate::driver::approval::{ApprovalRequest, Approver, Decision, NO_ONE_TO_ASK};

/// The calls waiting for the page, and the page of the run under way.
#[derive(Default)]
pub struct Approvals {
    next: AtomicU64,
    waiting: Mutex<HashMap<u64, Waiting>>,
    page: Mutex<Option<Events>>,
}

/// A decision awaited, and whether it may be an edit (a call's arguments; a plan has none).
struct Waiting {
    decided: oneshot::Sender<Decision>,
    editable: bool,
}

/// What became of a decision posted back.
#[derive(Debug, PartialEq, Eq)]
pub enum Answered {
    Taken,
    /// No decision waits under that id (the run ended, or it was answered).
    NotWaiting,
    /// An edit of something that has no arguments to edit (a plan); it still waits.
    NotEditable,
}

/// Said to the model when the page that was asked closed before answering.
const PAGE_GONE: &str = "the page that was asked closed before it answered";

fn locked<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

impl Approvals {
    /// Approval requests go to `page` from now on (`None`: no run is under way).
    pub fn watch(&self, page: Option<Events>) {
        *locked(&self.page) = page;
    }

    /// The person's decision on the call or plan `id`.
    pub fn answer(&self, id: u64, decision: Decision) -> Answered {
        let mut waiting = locked(&self.waiting);
        if matches!(decision, Decision::Edit(_)) && waiting.get(&id).is_some_and(|w| !w.editable) {
            return Answered::NotEditable;
        }
        match waiting.remove(&id).map(|call| call.decided.send(decision)) {
            Some(Ok(())) => Answered::Taken,
            _ => Answered::NotWaiting,
        }
    }

    async fn ask(&self, request: ApprovalRequest<'_>) -> Decision {
        let event = json!({
            "type": "approval_request", "iteration": request.iteration,
            "tool": request.tool, "args": request.args,
            "destructive": request.metadata.destructive,
        });
        self.wait(event, true).await
    }

    /// Shows `event` (given an `id`) on the page of the run under way, and waits for the
    /// decision posted back under that id (an edit only when `editable`).
    async fn wait(&self, mut event: Value, editable: bool) -> Decision {
        let Some(page) = locked(&self.page).clone() else {
            return Decision::Deny(NO_ONE_TO_ASK.into());
        };
        let id = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        let (sender, decided) = oneshot::channel();
        let waiting = Waiting {
            decided: sender,
            editable,
        };
        locked(&self.waiting).insert(id, waiting);
        // Taken out again however the wait ends, the loop's cancellation included.
        let _forget = Forget {
            approvals: self,
            id,
        };
        event["id"] = json!(id);
        if page.send(event).is_err() {
            return Decision::Deny(PAGE_GONE.into());
        }
        tokio::select! {
            decision = decided => decision.unwrap_or_else(|_| Decision::Deny(PAGE_GONE.into())),
            () = page.closed() => Decision::Deny(PAGE_GONE.into()),
        }
    }
}

/// Takes a call out of the waiting ones when its wait ends.
struct Forget<'a> {
    approvals: &'a Approvals,
    id: u64,
}

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        locked(&self.approvals.waiting).remove(&self.id);
    }
}

/// The [`Approver`] the driver is given: it asks the page.
pub struct PageApprover(pub Arc<Approvals>);

impl Approver for PageApprover {
    fn decide<'a>(&'a self, request: ApprovalRequest<'a>) -> BoxFuture<'a, Decision> {
        Box::pin(self.0.ask(request))
    }

    /// The plan (already shown by the watcher) runs once the page approves it.
    fn approve_plan<'a>(&'a self, _plan: &'a Value) -> BoxFuture<'a, bool> {
        Box::pin(async move {
            let event = json!({"type": "plan_approval_request"});
            self.0.wait(event, false).await == Decision::Approve
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::registry::ToolMetadata;

    fn request<'a>(args: &'a Value, metadata: &'a ToolMetadata) -> ApprovalRequest<'a> {
        ApprovalRequest {
            iteration: 2,
            tool: "write_file",
            args,
            metadata,
        }
    }

    #[tokio::test]
    async fn the_page_is_asked_and_its_answer_decides() {
        let approvals = Arc::new(Approvals::default());
        let (page, mut events) = tokio::sync::mpsc::unbounded_channel();
        approvals.watch(Some(page));
        let (args, metadata) = (json!({"path": "a"}), ToolMetadata::default());
        let asking = approvals.ask(request(&args, &metadata));
        let answering = async {
            let event = events.recv().await.unwrap_or_default();
            assert_eq!(event["type"], "approval_request");
            assert_eq!(event["tool"], "write_file");
            let id = event["id"].as_u64().unwrap_or_default();
            let no_such_call = approvals.answer(id + 1, Decision::Approve);
            assert_eq!(no_such_call, Answered::NotWaiting);
            let taken = approvals.answer(id, Decision::Deny("not now".into()));
            assert_eq!(taken, Answered::Taken);
            let again = approvals.answer(id, Decision::Approve);
            assert_eq!(again, Answered::NotWaiting, "one decision a call");
        };
        let (decision, ()) = tokio::join!(asking, answering);
        assert_eq!(decision, Decision::Deny("not now".into()));
        assert!(locked(&approvals.waiting).is_empty());
    }

    #[tokio::test]
    async fn a_call_may_be_edited_and_a_plan_may_not() {
        let approvals = Arc::new(Approvals::default());
        let (page, mut events) = tokio::sync::mpsc::unbounded_channel();
        approvals.watch(Some(page));
        let (args, metadata) = (json!({"path": "a"}), ToolMetadata::default());
        let asking = approvals.ask(request(&args, &metadata));
        let edited = json!({"path": "b"});
        let answering = async {
            let event = events.recv().await.unwrap_or_default();
            let id = event["id"].as_u64().unwrap_or_default();
            approvals.answer(id, Decision::Edit(edited.clone()))
        };
        let (decision, answered) = tokio::join!(asking, answering);
        assert_eq!(
            (decision, answered),
            (Decision::Edit(edited), Answered::Taken)
        );

        let approver = PageApprover(approvals.clone());
        let plan = json!({"steps": []});
        let asking = approver.approve_plan(&plan);
        let answering = async {
            let event = events.recv().await.unwrap_or_default();
            let id = event["id"].as_u64().unwrap_or_default();
            let edit = approvals.answer(id, Decision::Edit(json!({"steps": [1]})));
            // Refused, and the plan still waits for its answer.
            (edit, approvals.answer(id, Decision::Approve))
        };
        let (approved, answered) = tokio::join!(asking, answering);
        assert_eq!(answered, (Answered::NotEditable, Answered::Taken));
        assert!(approved);
    }

    #[tokio::test]
    async fn the_plan_runs_once_the_page_approves_it() {
        let approvals = Arc::new(Approvals::default());
        let approver = PageApprover(approvals.clone());
        let plan = json!({"steps": []});
        assert!(
            !approver.approve_plan(&plan).await,
            "with no page, no plan runs"
        );
        let (page, mut events) = tokio::sync::mpsc::unbounded_channel();
        approvals.watch(Some(page));
        let asking = approver.approve_plan(&plan);
        let answering = async {
            let event = events.recv().await.unwrap_or_default();
            assert_eq!(event["type"], "plan_approval_request");
            let id = event["id"].as_u64().unwrap_or_default();
            approvals.answer(id, Decision::Approve)
        };
        let (approved, answered) = tokio::join!(asking, answering);
        assert!(approved && answered == Answered::Taken);
    }

    #[tokio::test]
    async fn no_page_or_a_page_gone_denies() {
        let approvals = Approvals::default();
        let (args, metadata) = (json!({}), ToolMetadata::default());
        let decision = approvals.ask(request(&args, &metadata)).await;
        assert_eq!(decision, Decision::Deny(NO_ONE_TO_ASK.into()));
        let (page, events) = tokio::sync::mpsc::unbounded_channel();
        approvals.watch(Some(page));
        drop(events);
        let decision = approvals.ask(request(&args, &metadata)).await;
        assert_eq!(decision, Decision::Deny(PAGE_GONE.into()));
        assert!(locked(&approvals.waiting).is_empty());
    }
}
