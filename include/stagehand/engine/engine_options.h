// Tuning knobs of the scheduling engine, with the defaults a production fleet should use.
#pragma once

#include <chrono>
#include <memory>
#include <optional>

#include "stagehand/trace/sampler.h"
#include "stagehand/trace/span.h"

namespace stagehand {

struct EngineOptions {
  // How long a claim on a global task's row lasts without renewal. A running task renews every
  // lease/3; a host that dies is taken over about one lease after its last renewal.
  std::chrono::milliseconds lease{10000};
  // The safety-net poll: how often waiting global tasks are polled even when nothing announced a
  // change (catches writers that do not notify: Backstage workers, other processes on SQLite).
  std::chrono::milliseconds poll_interval{5000};
  // Where the store announces its writers' changes (PostgreSQL NOTIFY), a safety-net poll that
  // finds nothing unannounced doubles the wait before the next one, up to this; a poll that finds
  // an unannounced change (a Backstage worker's write, say) or a lost subscription brings it back
  // to poll_interval. So an idle stagehand-only fleet costs one statement a minute per host, and a
  // fleet shared with Backstage workers keeps polling every poll_interval. A value at or below
  // poll_interval keeps the interval fixed.
  std::chrono::milliseconds max_poll_interval{60000};
  // How often expired runs are swept (the janitor) at the least. Zero: with every safety-net poll.
  // Runs this host knows to be held elsewhere are swept when their expiry passes, whatever this.
  std::chrono::milliseconds janitor_interval{0};
  // Most task functions running at once in this plugin; a due task is not claimed without a free
  // slot.
  int max_concurrency = 32;
  // How long Shutdown waits for running tasks to return after signalling their stop tokens.
  std::chrono::milliseconds shutdown_grace{10000};
  // How long a host waits before re-polling after another host announced a release (PostgreSQL
  // NOTIFY). Releases of many runs then cost one poll per window instead of one each; the run's
  // next start is rarely sooner (the releasing host itself re-polls at once). Zero: poll at once.
  std::chrono::milliseconds release_poll_delay{20};
  // The longest wait before the database work is tried again after the database failed (the
  // waits start at 100 ms and double up to this, never more than a tenth of the lease).
  std::chrono::milliseconds retry_backoff{1000};
  // How long the releases this host wrote are kept to be written again if the database's server
  // changes (a failover to an asynchronous standby may lack the last ones). Set it above the
  // replication lag the standbys may have.
  std::chrono::milliseconds replay_window{30000};
  // Whether runs are recorded in the store's run history (where it keeps one).
  bool record_history = true;
  // When set, each run gets a W3C trace context of its own (RunControl::trace, RunInfo::trace): a
  // new span id in the trace of the TriggerTask call that asked for the run, or in a new trace,
  // sampled by this sampler. nullopt (the default): runs carry no trace context.
  std::optional<SamplerConfig> trace_runs;
  // Where the task functions of sampled runs put their own spans (RunControl::spans); null: they
  // have none to put them.
  std::shared_ptr<SpanSink> span_sink;
};

}  // namespace stagehand
