// SPDX-License-Identifier: MIT
// The control log (AOSHIM_CONTROL_LOG): one line per layer-boundary call,
//
//   <call> <layer> <microbatch>\n      e.g. "layer_begin 3 0", "step_end -1 -1"
//
// written before the engine sees the call, so it shows what the program told
// aoshim also when the engine is disabled, declines, or there is no GPU.
#ifndef AO_CTLLOG_H
#define AO_CTLLOG_H

typedef enum ao_ctl_call_e {
    AO_CTL_LAYER_BEGIN,
    AO_CTL_LAYER_END,
    AO_CTL_BACKWARD_BEGIN,
    AO_CTL_BACKWARD_END,
    AO_CTL_STEP_END,
    AO_CTL_SET_MICROBATCH,
    AO_CTL_SET_SCHEDULE, // the "layer" field is the schedule, the microbatch -1
    AO_CTL_OFFLOAD_LAYER,
    AO_CTL_RELEASE_LAYER,
    AO_CTL_RELOAD_LAYER,
} ao_ctl_call_t;

// Log one call: arg is the layer, or for set_microbatch the new microbatch
// (ignored for step_end). Cheap when AOSHIM_CONTROL_LOG is unset.
void ao_ctllog(ao_ctl_call_t call, int arg);
// After the call: the log's own idea of the current microbatch follows what
// the engine accepted (rc: the call's AOSHIM_* code).
void ao_ctllog_done(ao_ctl_call_t call, int arg, int rc);
// In a forked child: forget the parent's file.
void ao_ctllog_forked(void);

#endif // AO_CTLLOG_H
