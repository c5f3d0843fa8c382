/* The public run API (commgraph/plan.h): every call goes through the plan's
 * executor (executor.h), chosen when the plan was compiled. */
#include <stdio.h>
#include <string.h>

#include "device_exec.h"
#include "error.h"
#include "executor.h"
#include "host_exec.h"
#include "plan_internal.h"

const cg_executor_t *cg_executor_for(int device) {
  return device == CG_DEVICE_HOST ? &cg_host_executor : cg_device_executor();
}

cg_status_t cg_plan_start(cg_plan_t *plan) {
  if (!plan) return cg_fail(CG_ERR_INVALID_ARGUMENT, "cg_plan_start: NULL plan");
  return plan->exec->start(plan);
}

cg_status_t cg_plan_test(int *done, cg_plan_t *plan) {
  if (!done || !plan) return cg_fail(CG_ERR_INVALID_ARGUMENT, "cg_plan_test: NULL %s", done ? "plan" : "done");
  return plan->exec->test(done, plan);
}

cg_status_t cg_plan_wait(cg_plan_t *plan) {
  if (!plan) return cg_fail(CG_ERR_INVALID_ARGUMENT, "cg_plan_wait: NULL plan");
  return plan->exec->wait(plan);
}

cg_status_t cg_plan_run(cg_plan_t *plan) {
  if (!plan) return cg_fail(CG_ERR_INVALID_ARGUMENT, "cg_plan_run: NULL plan");
  cg_status_t st = cg_plan_start(plan);
  if (st == CG_SUCCESS) st = cg_plan_wait(plan);
  if (st != CG_SUCCESS) {
    /* the detail names the call that failed inside; name this one */
    static const char *const inner[] = {"cg_plan_start: ", "cg_plan_wait: ", "cg_plan_test: "};
    char detail[2560];
    snprintf(detail, sizeof detail, "%s", cg_error_last());
    const char *rest = detail;
    for (size_t k = 0; k < sizeof inner / sizeof *inner; k++)
      if (strncmp(rest, inner[k], strlen(inner[k])) == 0) rest += strlen(inner[k]);
    cg_fail(st, "cg_plan_run: %s", rest);
  }
  return st;
}
