// The error a call threw, which must be a ReactStepError: the one error type the client throws
// for an answer of the service that is not what it asked for.

import assert from "node:assert/strict";

import { ReactStepError } from "../../src/index.js";

export async function thrown(promise: Promise<unknown>): Promise<ReactStepError> {
  try {
    await promise;
  } catch (error) {
    assert.ok(error instanceof ReactStepError, `not a ReactStepError: ${String(error)}`);
    return error;
  }
  assert.fail("the call did not throw");
}
