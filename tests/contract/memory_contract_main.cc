// Runs the TaskStore contract suite against MemoryTaskStore: every store of a fixture shares one
// MemoryTaskTable (one "database"), and the database clock is a testing::ManualClock, so time
// passes only when the suite lets it.

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "contract/store_fixture.h"
#include "stagehand/store/memory_task_store.h"
#include "stagehand/time/manual_clock.h"

namespace stagehand::contract {
namespace {

class MemoryStoreFixture final : public StoreFixture {
 public:
  // The clock starts off whole seconds and milliseconds, so stored times must be truncated like
  // the SQL stores' to compare equal.
  MemoryStoreFixture()
      : clock_(testing::ManualClock::DefaultStart() + std::chrono::microseconds(7'261'234'567)),
        raw_("contract", clock_) {}

  std::unique_ptr<TaskStore> OpenStore() override {
    return std::make_unique<testing::MemoryTaskStore>("contract", clock_, raw_.table());
  }

  void LetTimePass(std::chrono::milliseconds duration) override { clock_.Advance(duration); }

  void PutRawRow(const TaskRow& row) override { raw_.PutRow(row); }

  std::optional<TaskRow> GetRawRow(const std::string& id) override {
    Result<std::vector<TaskRow>> rows = raw_.States();
    if (!rows.ok()) return std::nullopt;
    for (TaskRow& row : *rows) {
      if (row.id == id) return std::move(row);
    }
    return std::nullopt;
  }

  const Clock& clock() override { return clock_; }

  bool supports_notifications() const override { return true; }
  bool tells_recorded_runs() const override { return true; }
  bool rolls_back_keyed_requests() const override { return false; }

  int claim_race_rounds() const override { return 10'000; }

 private:
  testing::ManualClock clock_;
  // A store used only to write and read rows behind the back of the stores under test.
  testing::MemoryTaskStore raw_;
};

}  // namespace

std::unique_ptr<StoreFixture> MakeStoreFixture() { return std::make_unique<MemoryStoreFixture>(); }

}  // namespace stagehand::contract
