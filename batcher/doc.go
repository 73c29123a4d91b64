// Package batcher groups concurrent requests into batches bounded by size and
// by a time window, calls one injected run function per batch, and hands each
// caller its own result.
//
// It owns its queue and its batch loops (one goroutine per run instance) and
// exposes one blocking call, [Batcher.Submit]. It batches generic items: it
// knows nothing about images, HTTP or ONNX and must not import any other
// package of this module (but internal/queue, its FIFO) nor any metrics
// library; observability goes through the optional [Hooks] and
// [Batcher.Stats].
//
// Ownership: the value passed to Submit is referenced by the batcher only until
// Submit returns, so a caller may return pooled buffers right after. An item
// whose context ends while it is queued is removed from the queue and
// answered with ctx.Err() at once; it is never passed to run and never takes a
// batch slot. An item already taken into a running batch waits for that
// batch's result. Every accepted item is answered exactly once.
//
// Flush rules: a batch is dispatched when MaxBatchSize items are queued, when
// MaxQueueDelay has passed since the OLDEST queued item arrived, or, with
// PreferredBatchSizes, as soon as the largest preferred size not above the
// queued count can be formed. In adaptive mode the window is computed from an
// online model of run time (see [AdaptiveConfig]). Items with a deadline that
// the model predicts they cannot meet are refused at once with
// [ErrWouldMissDeadline].
//
// A Batcher must be closed with [Batcher.Close]; Close runs everything already
// accepted to completion and stops the batch loops.
package batcher
