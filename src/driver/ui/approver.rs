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
    waiting: Mutex<HashMap<u64, oneshot::Sender<Decision>>>,
    page: Mutex<Option<Events>>,
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

    /// The person's decision on the call `id`; `false` when no call waits under that id.
    pub fn answer(&self, id: u64, decision: Decision) -> bool {
        let waiting = locked(&self.waiting).remove(&id);
        waiting.is_some_and(|call| call.send(decision).is_ok())
    }

    async fn ask(&self, request: ApprovalRequest<'_>) -> Decision {
        self.wait(json!({
            "type": "approval_request", "iteration": request.iteration,
            "tool": request.tool, "args": request.args,
            "destructive": request.metadata.destructive,
        }))
        .await
    }

    /// Shows `event` (given an `id`) on the page of the run under way, and waits for the
    /// decision posted back under that id.
    async fn wait(&self, mut event: Value) -> Decision {
        let Some(page) = locked(&self.page).clone() else {
            return Decision::Deny(NO_ONE_TO_ASK.into());
        };
        let id = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        let (sender, decided) = oneshot::channel();
        locked(&self.waiting).insert(id, sender);
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
            self.0.wait(event).await == Decision::Approve
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
            assert!(!approvals.answer(id + 1, Decision::Approve), "no such call");
            assert!(approvals.answer(id, Decision::Deny("not now".into())));
        };
        let (decision, ()) = tokio::join!(asking, answering);
        assert_eq!(decision, Decision::Deny("not now".into()));
        assert!(locked(&approvals.waiting).is_empty());
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
        assert!(approved && answered);
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
