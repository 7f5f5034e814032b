#include "stagehand/model/run_report.h"

namespace stagehand {

RunReport::RunReport(std::size_t max_output_bytes) : max_output_bytes_(max_output_bytes) {}

void RunReport::AppendOutput(std::string_view bytes) {
  MutexLock lock(mu_);
  state_.output_bytes += bytes.size();
  if (bytes.size() >= max_output_bytes_) {
    state_.output_tail.assign(bytes.substr(bytes.size() - max_output_bytes_));
    return;
  }
  const std::size_t keep = max_output_bytes_ - bytes.size();
  if (state_.output_tail.size() > keep) {
    state_.output_tail.erase(0, state_.output_tail.size() - keep);
  }
  state_.output_tail.append(bytes);
}

void RunReport::SetExitCode(int code) {
  MutexLock lock(mu_);
  state_.exit_code = code;
}

void RunReport::SetSignal(int signal) {
  MutexLock lock(mu_);
  state_.signal = signal;
}

void RunReport::SetHttpStatus(int status) {
  MutexLock lock(mu_);
  state_.http_status = status;
}

RunReport::Snapshot RunReport::Read() const {
  MutexLock lock(mu_);
  return state_;
}

}  // namespace stagehand
