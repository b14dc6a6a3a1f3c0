//! A native loop is one turn: the task is its first user message, and each later step sends
//! only the calls and their results after it. Every provider counts a turn from the last user
//! message and drops the turn's reasoning at a new one, so a client that sends the task again
//! with every step would start a new turn each time.

use super::history::Role;
use super::input::StepInput;

/// Leaves out the query of a step in the middle of a native loop when it only repeats the task
/// the turn began with: it is not sent again, and not added to the history a second time.
pub(super) fn keep_one_turn(input: &mut StepInput) {
    if repeats_the_task(input) {
        input.user_query.clear();
    }
}

/// Whether the history ends with tool results and its latest user turn says what the query
/// says.
fn repeats_the_task(input: &StepInput) -> bool {
    let query = input.user_query.trim();
    let mid_loop = input
        .history
        .last()
        .is_some_and(|t| t.role == Role::ToolObservation);
    let task = input.history.iter().rev().find(|t| t.role == Role::User);
    mid_loop && !query.is_empty() && task.is_some_and(|t| t.content.trim() == query)
}
