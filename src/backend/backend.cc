#include "stagehand/backend/backend.h"
