// The seam between the TaskStore contract suite and each store implementation. Every
// <store>_contract_main.cc defines MakeStoreFixture() for its store; the suite in
// task_store_contract.cc only talks to this interface.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "stagehand/base/status.h"
#include "stagehand/store/task_store.h"
#include "stagehand/time/clock.h"

namespace stagehand::contract {

// One fresh, empty, migrated plugin database per fixture. Not thread-safe (the suite's threads only
// use the stores it opens).
class StoreFixture {
 public:
  virtual ~StoreFixture() = default;

  // Returns a new store on this fixture's database, as another host would open it (its own
  // connection(s)). The store is already migrated. `plugin_id` names it in errors.
  virtual std::unique_ptr<TaskStore> OpenStore() = 0;

  // Lets the database clock move forward by at least `duration`: advances the manual clock for
  // the memory store, sleeps in real time for the SQL stores (keep these short).
  virtual void LetTimePass(std::chrono::milliseconds duration) = 0;

  // Writes `row` verbatim (plain SQL INSERT/UPDATE in the dialect), as a Backstage worker would.
  virtual void PutRawRow(const TaskRow& row) = 0;

  // Reads the raw row back (nullopt if missing), bypassing the store under test.
  virtual std::optional<TaskRow> GetRawRow(const std::string& id) = 0;

  // The clock the stores were opened with (host wall clock for SQL stores).
  virtual const Clock& clock() = 0;

  // Whether the store delivers events through Listen().
  virtual bool supports_notifications() const = 0;

  // Whether a retried release tells that it wrote its run's missing record
  // (ReleaseResult::recorded).
  virtual bool tells_recorded_runs() const { return false; }

  // Whether a keyed request whose apply fails rolls the store's writes in it back (not the
  // memory store, whose apply fails only where it wrote nothing).
  virtual bool rolls_back_keyed_requests() const { return true; }

  // The database clock's granularity for stored times (1 ms for all stagehand writes).
  virtual std::chrono::milliseconds time_resolution() const { return std::chrono::milliseconds(1); }

  // How many rounds the claim race runs (8 stores claiming one due row per round).
  virtual int claim_race_rounds() const { return 200; }
};

// The base of the SQL stores' fixtures: their databases keep real time, on the host's clock.
class SqlStoreFixture : public StoreFixture {
 public:
  void LetTimePass(std::chrono::milliseconds duration) override {
    std::this_thread::sleep_for(duration);
  }

  const Clock& clock() override { return SystemClock::Instance(); }

 protected:
  // Returns the store `opened` once it has migrated; nullptr, with the test failed, when opening
  // or migrating failed.
  static std::unique_ptr<TaskStore> Migrated(Result<std::unique_ptr<TaskStore>> opened) {
    if (!opened.ok()) {
      ADD_FAILURE() << opened.status().ToString();
      return nullptr;
    }
    if (Status migrated = (*opened)->Migrate(); !migrated.ok()) {
      ADD_FAILURE() << migrated.ToString();
      return nullptr;
    }
    return std::move(*opened);
  }
};

// Defined once per contract binary.
std::unique_ptr<StoreFixture> MakeStoreFixture();

}  // namespace stagehand::contract
